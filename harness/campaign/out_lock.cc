#include "harness/campaign/out_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "harness/detail/sys.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

// The holder's line for the lock file: "PID\nCOMMAND LINE\n".
std::string holder_text() {
  std::string text = std::to_string(::getpid()) + "\n";
  if (auto raw = detail::read_file("/proc/self/cmdline", 4096); raw && !raw->empty()) {
    std::vector<std::string> argv;
    std::string_view rest(*raw);
    while (!rest.empty()) {
      const auto end = rest.find('\0');
      argv.emplace_back(rest.substr(0, end));
      rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    }
    std::string cmd = detail::shell_join(argv);
    for (char& c : cmd)
      if (c == '\n') c = ' ';
    text += cmd + "\n";
  }
  return text;
}

struct holder {
  pid_t pid = 0;  // 0: not recorded
  std::string command;
};

// What the lock file says about its holder; pid 0 while it says nothing usable.
holder read_holder(const fs::path& path) {
  holder h;
  auto text = detail::read_file(path, 4096);
  if (!text) return h;
  const auto nl = text->find('\n');
  if (nl == std::string::npos || nl == 0 || nl > 10) return h;
  long pid = 0;
  for (std::size_t i = 0; i < nl; ++i) {
    const char c = (*text)[i];
    if (c < '0' || c > '9') return h;
    pid = pid * 10 + (c - '0');
  }
  h.pid = static_cast<pid_t>(pid);
  auto cmd_end = text->find('\n', nl + 1);
  if (cmd_end != std::string::npos) h.command = text->substr(nl + 1, cmd_end - nl - 1);
  return h;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

core::status refusal(const fs::path& dir, const fs::path& path, const holder& h) {
  if (h.pid == ::getpid())
    return core::status(core::errc::busy, dir.string() + " is already held by this process (pid " + std::to_string(h.pid) +
                                              "): one campaign per output directory");
  std::string who = h.pid ? "pid " + std::to_string(h.pid) : std::string("a process that has not written its pid");
  if (h.pid && !h.command.empty()) who += " (" + h.command + ")";
  return core::status(core::errc::busy, dir.string() + " is in use by another campaign: " + who + " holds " + path.string() +
                                            "; wait for it to end or use another --out");
}

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

}  // namespace

core::result<out_dir_lock> out_dir_lock::acquire(const fs::path& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return core::status(core::errc::io_error, "create " + out_dir.string() + ": " + ec.message());
  const fs::path path = out_dir / out_lock_file;
  // A refusal waits a moment for a holder that has locked but not yet written its pid (the file
  // is empty, or names the holder before it, killed), and a lock file that its holder removed
  // between our open and our flock is opened again.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
  holder last;
  for (;;) {
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return detail::sys_error(errno, "open " + path.string());
    int rc;
    do {
      rc = ::flock(fd, LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      struct stat held {}, named {};
      if (::fstat(fd, &held) != 0) {
        const int err = errno;
        ::close(fd);
        return detail::sys_error(err, "stat " + path.string());
      }
      if (::stat(path.c_str(), &named) == 0 && same_file(held, named)) {
        // Only a hint for whoever is refused next: a failure to write it leaves the lock as good.
        if (::ftruncate(fd, 0) == 0) (void)detail::write_all(fd, holder_text(), path.string());
        return out_dir_lock(fd, out_dir);
      }
      ::close(fd);  // a file its holder removed as it released it: nobody else would see our lock
    } else {
      const int err = errno;
      ::close(fd);
      if (err != EWOULDBLOCK) return detail::sys_error(err, "lock " + path.string());
      if (holder h = read_holder(path); h.pid != 0) last = h;
      if (last.pid != 0 && alive(last.pid)) return refusal(out_dir, path, last);
    }
    if (std::chrono::steady_clock::now() >= deadline) return refusal(out_dir, path, last);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

out_dir_lock::out_dir_lock(out_dir_lock&& other) noexcept : fd_(other.fd_), dir_(std::move(other.dir_)) { other.fd_ = -1; }

out_dir_lock& out_dir_lock::operator=(out_dir_lock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    dir_ = std::move(other.dir_);
    other.fd_ = -1;
  }
  return *this;
}

out_dir_lock::~out_dir_lock() { release(); }

void out_dir_lock::release() noexcept {
  if (fd_ < 0) return;
  // Removed while still locked, so that OUT holds only what the campaign wrote; a campaign that
  // opened this file meanwhile sees it gone once it locks it, and opens the path again.
  const fs::path path = dir_ / out_lock_file;
  struct stat held {}, named {};
  if (::fstat(fd_, &held) == 0 && ::stat(path.c_str(), &named) == 0 && same_file(held, named)) ::unlink(path.c_str());
  // Unlocked explicitly: a clone that has not yet closed its inherited copy of the descriptor
  // (a keeper starting up) would otherwise keep the lock past the close.
  (void)::flock(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
}

}  // namespace faultline::harness
