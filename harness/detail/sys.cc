#include "harness/detail/sys.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace faultline::harness::detail {

core::status sys_error(int err, std::string_view what) {
  auto code = err == ENOENT ? core::errc::not_found : core::errc::io_error;
  return core::status(code, std::string(what) + ": " + std::strerror(err));
}

core::status write_all(int fd, std::string_view data, std::string_view what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(errno, what);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

core::result<std::string> read_file(const std::filesystem::path& path, std::size_t limit_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys_error(errno, "open " + path.string());
  std::string out;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return sys_error(err, "read " + path.string());
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (limit_bytes && out.size() >= limit_bytes) {
      out.resize(limit_bytes);
      break;
    }
  }
  ::close(fd);
  return out;
}

std::string iso_utc(std::chrono::system_clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms % 1000));
  return buf;
}

std::string shell_quote(std::string_view arg) {
  bool plain = !arg.empty();
  for (char c : arg) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("@%+=:,./_-", c))) plain = false;
  }
  if (plain) return std::string(arg);
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

std::filesystem::path self_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.parent_path();
}

}  // namespace faultline::harness::detail
