#include "harness/run/core_keeper.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>

#include "faults/preload/protocol.h"
#include "harness/detail/sys.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t max_held = 64;
constexpr auto max_age = std::chrono::minutes(10);
constexpr std::size_t max_followed = 32;  // directories watched for one run directory's records

}  // namespace

core_keeper& core_keeper::instance() {
  static core_keeper* keeper = new core_keeper();  // never destroyed: its thread runs to the end
  return *keeper;
}

core::status core_keeper::start() {
  if (inotify_fd_ >= 0) return {};
  inotify_fd_ = ::inotify_init1(IN_CLOEXEC);
  if (inotify_fd_ < 0) return core::status::from_errno(errno, "inotify_init1");
  try {
    std::thread([this] { watch_loop(); }).detach();
  } catch (const std::system_error& e) {
    ::close(inotify_fd_);
    inotify_fd_ = -1;
    return core::status(core::errc::io_error, std::string("cannot start the core keeper's thread: ") + e.what());
  }
  return {};
}

core::status core_keeper::add_watch(const fs::path& dir, const std::string& name, bool follow, const fs::path& follower) {
  std::lock_guard lock(mu_);
  for (auto& w : watched_) {
    if (w.dir != dir || w.name != name || w.follow != follow) continue;
    if (follower.empty()) w.lasting = true;
    else w.followers.insert(follower);
    return {};
  }
  if (!follower.empty()) {
    const auto named = std::count_if(watched_.begin(), watched_.end(), [&](const watched& w) { return w.followers.count(follower) > 0; });
    if (named >= static_cast<std::ptrdiff_t>(max_followed)) return core::status(core::errc::unavailable, "too many directories followed");
  }
  if (auto s = start(); !s) return s;
  // IN_CREATE: the kernel creates the core (after unlinking the previous one of that name).
  // IN_MOVED_TO: the agent renames its cwd.PID record into place. IN_MASK_ADD: one directory may
  // be both (each inode has one watch).
  const std::uint32_t mask = (follow ? IN_MOVED_TO : IN_CREATE) | IN_ONLYDIR | IN_MASK_ADD;
  const int wd = ::inotify_add_watch(inotify_fd_, dir.c_str(), mask);
  if (wd < 0) return core::status::from_errno(errno, "inotify_add_watch " + dir.string());
  watched w{wd, dir, name, follow, follow || follower.empty(), {}};
  if (!follower.empty()) w.followers.insert(follower);
  watched_.push_back(std::move(w));
  return {};
}

core::status core_keeper::watch(const fs::path& dir, const std::string& name) { return add_watch(dir, name, false); }

core::status core_keeper::follow(const fs::path& run_dir, const std::string& name) { return add_watch(run_dir, name, true); }

void core_keeper::unfollow(const fs::path& run_dir) {
  std::lock_guard lock(mu_);
  std::set<int> dropped;
  for (auto it = watched_.begin(); it != watched_.end();) {
    it->followers.erase(run_dir);
    const bool gone = (it->follow && it->dir == run_dir) || (!it->follow && !it->lasting && it->followers.empty());
    if (gone) {
      dropped.insert(it->wd);
      it = watched_.erase(it);
    } else {
      ++it;
    }
  }
  // The kernel's watch goes unless the directory is still watched for something else.
  for (int wd : dropped)
    if (std::none_of(watched_.begin(), watched_.end(), [&](const watched& w) { return w.wd == wd; }))
      ::inotify_rm_watch(inotify_fd_, wd);
}

void core_keeper::watch_loop() {
  alignas(inotify_event) char buf[16 * 1024];
  const std::string record_prefix = agent::cwd_file_prefix;
  for (;;) {
    const ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    for (ssize_t at = 0; at < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if ((ev->mask & IN_IGNORED) != 0) {  // the directory is gone (a removed worktree)
        std::lock_guard lock(mu_);
        watched_.erase(std::remove_if(watched_.begin(), watched_.end(), [&](const watched& w) { return w.wd == ev->wd; }),
                       watched_.end());
        continue;
      }
      if (ev->len == 0 || (ev->mask & IN_ISDIR) != 0) continue;
      fs::path file;
      fs::path record;
      fs::path follower;
      std::string core_name;
      {
        std::lock_guard lock(mu_);
        for (const auto& w : watched_) {
          if (w.wd != ev->wd) continue;
          if (!w.follow && (ev->mask & IN_CREATE) != 0 && w.name == ev->name) file = w.dir / w.name;
          if (w.follow && (ev->mask & IN_MOVED_TO) != 0 && std::string_view(ev->name).rfind(record_prefix, 0) == 0) {
            record = w.dir / ev->name;
            follower = w.dir;
            core_name = w.name;
          }
        }
      }
      if (!file.empty()) hold(file);
      if (!record.empty()) {
        // The directory a process of a run moved to: its cores are held from now on.
        auto text = detail::read_file(record.string(), 4096);
        if (text && !text->empty() && (*text)[0] == '/') (void)add_watch(fs::path(*text), core_name, false, follower);
      }
    }
  }
}

void core_keeper::hold(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return;  // replaced or removed already
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::getuid()) {
    ::close(fd);
    return;
  }
  std::vector<int> to_close;
  {
    std::lock_guard lock(mu_);
    const bool known = std::any_of(held_.begin(), held_.end(), [&](const entry& e) {
      return e.core.device == st.st_dev && e.core.inode == st.st_ino;
    });
    if (known || live_.empty()) {
      to_close.push_back(fd);  // no run is running: it is no run's core
    } else {
      const auto now = std::chrono::steady_clock::now();
      held_.push_back({{fs::path("/proc/self/fd") / std::to_string(fd), file, fd, st.st_dev, st.st_ino}, now, tickets_});
      while (!held_.empty() && (held_.size() > max_held || now - held_.front().since > max_age)) {
        to_close.push_back(held_.front().core.fd);
        held_.erase(held_.begin());
      }
    }
  }
  for (int f : to_close) ::close(f);
}

std::vector<core_keeper::held_core> core_keeper::held(const fs::path& dir) {
  std::lock_guard lock(mu_);
  std::vector<held_core> out;
  for (const auto& e : held_) {
    if (e.core.name.parent_path() != dir) continue;
    // The caller's own descriptor: another run's release cannot close it under the caller.
    const int fd = ::fcntl(e.core.fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) continue;
    lent_.insert(fd);
    held_core c = e.core;
    c.fd = fd;
    c.path = fs::path("/proc/self/fd") / std::to_string(fd);
    out.push_back(std::move(c));
  }
  return out;
}

void core_keeper::release(const held_core& core, bool mine) {
  int original = -1;
  {
    std::lock_guard lock(mu_);
    lent_.erase(core.fd);
  }
  if (mine) {
    std::lock_guard lock(mu_);
    auto it = std::find_if(held_.begin(), held_.end(), [&](const entry& e) {
      return e.core.device == core.device && e.core.inode == core.inode;
    });
    if (it != held_.end()) {
      original = it->core.fd;
      held_.erase(it);
    }
    struct stat st {};
    if (::lstat(core.name.c_str(), &st) == 0 && st.st_dev == core.device && st.st_ino == core.inode)
      ::unlink(core.name.c_str());
  }
  if (original >= 0) ::close(original);
  if (core.fd >= 0) ::close(core.fd);
}

std::uint64_t core_keeper::begin_run() {
  std::lock_guard lock(mu_);
  live_.insert(++tickets_);
  return tickets_;
}

std::vector<int> core_keeper::take_unowned() {
  std::vector<int> out;
  const std::uint64_t oldest_live = live_.empty() ? tickets_ + 1 : *live_.begin();
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->newest_run < oldest_live) {
      out.push_back(it->core.fd);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void core_keeper::end_run(std::uint64_t ticket) {
  std::vector<int> to_close;
  {
    std::lock_guard lock(mu_);
    live_.erase(ticket);
    to_close = take_unowned();
  }
  for (int f : to_close) ::close(f);
}

std::set<int> core_keeper::descriptors() {
  std::lock_guard lock(mu_);
  std::set<int> out = lent_;
  if (inotify_fd_ >= 0) out.insert(inotify_fd_);
  for (const auto& e : held_) out.insert(e.core.fd);
  return out;
}

}  // namespace faultline::harness
