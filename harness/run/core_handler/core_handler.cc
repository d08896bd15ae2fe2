#include "harness/run/core_handler/core_handler.h"

#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

constexpr const char* core_pattern_path = "/proc/sys/kernel/core_pattern";
constexpr auto self_test_wait = std::chrono::seconds(10);

bool has_space(std::string_view s) {
  for (char c : s)
    if (std::isspace(static_cast<unsigned char>(c))) return true;
  return false;
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::vector<std::string_view> split_spaces(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const std::size_t start = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

template <class T>
std::optional<T> number(std::string_view s) {
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// In the pattern, the previous pattern's '%' are doubled: the kernel expands the arguments of a
// pipe pattern, and "%%" is the one specifier that gives back what was written.
std::string escape_percent(std::string_view s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

std::optional<std::string> unescape_percent(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 1 >= s.size() || s[i + 1] != '%') return std::nullopt;  // not written by us
      ++i;
    }
    out += s[i];
  }
  return out;
}

// The kernel's cn_esc_printf: a value from a name never adds a path component.
std::string escaped_name(std::string_view v) {
  std::string out(v);
  for (char& c : out)
    if (c == '/') c = '!';
  if (out.empty() || out == ".") return "!";
  if (out == "..") return "!.";
  return out;
}

std::string read_small_file(const char* path, bool& ok) {
  ok = false;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return {};
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  ok = true;
  return text;
}

std::string not_writable_message(const std::string& why) {
  return "core_pattern is not writable here (" + why +
         "; in a container /proc/sys is often read-only); crash stacks need cores the harness can read: install the "
         "handler on the host, as root (`faultline cores --install`), or set kernel.core_uses_pid=1 there and run "
         "from a directory without a core/ folder";
}

core::status write_core_pattern(const std::string& text) {
  int fd = ::open(core_pattern_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM || err == EROFS)
      return core::status(core::errc::refused, not_writable_message(std::string("open: ") + std::strerror(err)));
    return core::status::from_errno(err, std::string("open ") + core_pattern_path);
  }
  ssize_t n;
  do {
    n = ::write(fd, text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (n < 0) {
    if (err == EACCES || err == EPERM || err == EROFS)
      return core::status(core::errc::refused, not_writable_message(std::string("write: ") + std::strerror(err)));
    return core::status::from_errno(err, std::string("write ") + core_pattern_path);
  }
  // The kernel cuts a long text short without an error: read it back.
  bool ok = false;
  const std::string now = trimmed(read_small_file(core_pattern_path, ok));
  if (!ok) return core::status::from_errno(errno, std::string("read ") + core_pattern_path);
  if (now != text)
    return core::status(core::errc::io_error, "core_pattern reads '" + now + "' after writing '" + text + "'");
  return {};
}

// The kernel runs the handler as root for every crash: whoever can replace it, or a directory
// above it, is root. Only root may.
core::status check_root_only(const fs::path& handler) {
  struct stat st {};
  if (::stat(handler.c_str(), &st) != 0) return core::status::from_errno(errno, "stat " + handler.string());
  if (!S_ISREG(st.st_mode)) return core::status(core::errc::invalid_argument, handler.string() + " is not a file");
  if (::access(handler.c_str(), X_OK) != 0)
    return core::status(core::errc::invalid_argument, handler.string() + " is not executable");
  const std::string advice =
      ": the kernel runs the handler as root for every crash on the machine, so it must be root's alone; copy it "
      "(install -o root -m 755 " + handler.string() + " /usr/local/libexec/) and pass --handler";
  if (st.st_uid != 0 || (st.st_mode & 022) != 0)
    return core::status(core::errc::invalid_argument,
                        handler.string() + " is owned by uid " + std::to_string(st.st_uid) + " or writable by others" + advice);
  for (fs::path dir = handler.parent_path();; dir = dir.parent_path()) {
    if (::stat(dir.c_str(), &st) != 0) return core::status::from_errno(errno, "stat " + dir.string());
    const bool sticky = (st.st_mode & S_ISVTX) != 0;
    if (st.st_uid != 0 || ((st.st_mode & 002) != 0 && !sticky) || ((st.st_mode & 020) != 0 && st.st_gid != 0 && !sticky))
      return core::status(core::errc::invalid_argument,
                          "the directory " + dir.string() + " above the handler is not root's alone" + advice);
    if (dir == dir.root_path() || dir.empty()) break;
  }
  return {};
}

// Crashes the handler itself (--self-test-crash) with FAULTLINE_RUN_DIR set, and waits for the
// core that the kernel should have piped to it.
core::status self_test(const fs::path& handler) {
  char dir_template[] = "/tmp/faultline-core-handler-test.XXXXXX";
  if (!::mkdtemp(dir_template)) return core::status::from_errno(errno, "mkdtemp");
  const fs::path dir = dir_template;
  struct remove_dir {
    fs::path p;
    ~remove_dir() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};

  const std::string env_run_dir = "FAULTLINE_RUN_DIR=" + dir.string();
  const std::string exe = handler.string();
  const char* argv[] = {exe.c_str(), "--self-test-crash", nullptr};
  const char* envp[] = {env_run_dir.c_str(), "PATH=/usr/bin:/bin", nullptr};
  pid_t pid = 0;
  if (int err = ::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, const_cast<char* const*>(argv),
                              const_cast<char* const*>(envp));
      err != 0)
    return core::status::from_errno(err, "posix_spawn " + exe);
  const auto deadline = std::chrono::steady_clock::now() + self_test_wait;
  int wstatus = 0;
  bool reaped = false;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t r = ::waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) {
      reaped = true;
      break;
    }
    if (r < 0 && errno != EINTR) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!reaped) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &wstatus, 0);
    return core::status(core::errc::unavailable, "the test crash of " + exe + " did not end in " +
                                                     std::to_string(self_test_wait.count()) + " s");
  }
  if (!WIFSIGNALED(wstatus) || WTERMSIG(wstatus) != SIGSEGV)
    return core::status(core::errc::unavailable, exe + " --self-test-crash did not die of SIGSEGV (wait status " +
                                                     std::to_string(wstatus) + ")");
  const std::string cannot_run =
      "it could not run the handler (the kernel runs it from the host's filesystem, as root, outside any container; "
      "see the kernel log)";
  if (!WCOREDUMP(wstatus))
    return core::status(core::errc::unavailable, "the kernel dumped no core for a test crash: " + cannot_run);
  // The kernel does not wait for the handler (core_pipe_limit 0): its last bytes and the rename
  // may come after the crash ends.
  const fs::path core = handler_core_path(dir, pid);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    if (fs::is_regular_file(core, ec)) {
      bool ok = false;
      const std::string head = read_small_file(core.c_str(), ok).substr(0, 4);
      if (ok && head == "\177ELF") return {};
      return core::status(core::errc::unavailable, "the test crash's core " + core.string() + " is not an ELF file");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return core::status(core::errc::unavailable,
                      "the handler did not bring the test crash's core to " + core.string() + " in " +
                          std::to_string(self_test_wait.count()) + " s (see the kernel log)");
}

}  // namespace

fs::path handler_core_path(const fs::path& run_dir, pid_t pid) { return run_dir / ("core." + std::to_string(pid)); }

core::result<std::string> core_handler_pattern(const std::string& handler, const std::string& current_text) {
  if (handler.empty() || handler[0] != '/')
    return core::result<std::string>(core::errc::invalid_argument, "the handler's path must be absolute: '" + handler + "'");
  if (has_space(handler))
    return core::result<std::string>(core::errc::invalid_argument, "the handler's path has white space: '" + handler + "'");
  const std::string current = trimmed(current_text);
  std::string previous = current;
  if (auto ours = parse_core_handler_pattern(current)) {
    if (!ours->previous)
      return core::result<std::string>(core::errc::invalid_argument,
                                        "core_pattern '" + current +
                                            "' runs faultline-core-handler but its previous pattern cannot be read; "
                                            "set one first (sysctl kernel.core_pattern=core)");
    previous = *ours->previous;
  } else if (!current.empty() && current[0] == '|') {
    return core::result<std::string>(core::errc::invalid_argument,
                                      "core_pattern pipes cores to " + current +
                                          ": another crash collector is installed; remove it first (or keep it: "
                                          "faultline then reports crashes by their signal)");
  } else if (!current.empty() && current[0] == '@') {
    return core::result<std::string>(core::errc::invalid_argument,
                                      "core_pattern sends cores to the socket " + current +
                                          ": another crash collector is installed; remove it first");
  }
  if (previous.empty())
    return core::result<std::string>(core::errc::invalid_argument,
                                      "core_pattern is empty (no process dumps core); set one first (sysctl kernel.core_pattern=core)");
  if (has_space(previous))
    return core::result<std::string>(core::errc::invalid_argument,
                                      "core_pattern '" + previous + "' has white space: it cannot ride as one argument of the handler");
  std::string pattern = "|" + handler + " " + std::string(core_handler_specifiers) + " " + escape_percent(previous);
  if (pattern.size() > core_pattern_max_bytes)
    return core::result<std::string>(core::errc::invalid_argument,
                                      "the pattern '" + pattern + "' is " + std::to_string(pattern.size()) +
                                          " bytes; core_pattern holds " + std::to_string(core_pattern_max_bytes) +
                                          ": install the handler at a shorter path (e.g. /usr/local/libexec/)");
  return pattern;
}

std::optional<core_handler_pattern_parts> parse_core_handler_pattern(std::string_view pattern) {
  while (!pattern.empty() && std::isspace(static_cast<unsigned char>(pattern.back()))) pattern.remove_suffix(1);
  if (pattern.empty() || pattern[0] != '|') return std::nullopt;
  const auto words = split_spaces(pattern.substr(1));
  if (words.empty()) return std::nullopt;
  const std::string_view program = words[0];
  const auto slash = program.rfind('/');
  if (program.substr(slash == std::string_view::npos ? 0 : slash + 1) != core_handler_name) return std::nullopt;
  core_handler_pattern_parts parts;
  parts.handler = std::string(program);
  const auto expected = split_spaces(core_handler_specifiers);
  if (words.size() != expected.size() + 2) return parts;
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (words[i + 1] != expected[i]) return parts;
  parts.previous = unescape_percent(words.back());
  if (parts.previous && parts.previous->empty()) parts.previous.reset();
  return parts;
}

std::optional<core_handler_args> parse_core_handler_args(const std::vector<std::string_view>& argv) {
  if (argv.size() < 6) return std::nullopt;
  core_handler_args a;
  auto pid = number<pid_t>(argv[1]);
  auto sig = number<int>(argv[2]);
  auto limit = number<std::uint64_t>(argv[3]);
  if (!pid || *pid <= 0 || !sig || !limit) return std::nullopt;
  a.host_pid = *pid;
  a.signal = *sig;
  a.limit_bytes = *limit;
  for (std::size_t i = 4; i + 1 < argv.size(); ++i) {
    if (i > 4) a.comm += ' ';
    a.comm += argv[i];
  }
  a.previous = std::string(argv.back());
  if (a.previous.empty()) return std::nullopt;
  return a;
}

std::string expand_core_pattern(std::string_view pattern, const crashed_process& p, bool uses_pid) {
  std::string out;
  bool pid_in_pattern = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    if (++i >= pattern.size()) break;  // a '%' at the end ends the name, as in the kernel
    switch (pattern[i]) {
      case '%': out += '%'; break;
      case 'p': pid_in_pattern = true; out += std::to_string(p.pid); break;
      case 'P': out += std::to_string(p.host_pid); break;
      case 'i': out += std::to_string(p.pid); break;
      case 'I': out += std::to_string(p.host_pid); break;
      case 'u': out += std::to_string(p.uid); break;
      case 'g': out += std::to_string(p.gid); break;
      case 'd': out += std::to_string(p.dumpable); break;
      case 's': out += std::to_string(p.signal); break;
      case 't': out += std::to_string(p.time_s); break;
      case 'h': out += escaped_name(p.hostname); break;
      case 'e': out += escaped_name(p.comm); break;
      case 'f': {
        const auto slash = p.executable.rfind('/');
        out += escaped_name(slash == std::string::npos ? p.executable : p.executable.substr(slash + 1));
        break;
      }
      case 'E': {
        std::string path = p.executable;
        for (char& c : path)
          if (c == '/') c = '!';
        out += path;
        break;
      }
      case 'c': out += std::to_string(p.limit_bytes); break;
      default: break;  // unknown to the kernel too, or not known to the handler (%C, %F)
    }
  }
  if (uses_pid && !pid_in_pattern) out += "." + std::to_string(p.pid);
  return out;
}

std::optional<std::string> environ_value(std::string_view environ_image, std::string_view name) {
  std::size_t at = 0;
  while (at < environ_image.size()) {
    std::size_t end = environ_image.find('\0', at);
    if (end == std::string_view::npos) end = environ_image.size();
    const std::string_view entry = environ_image.substr(at, end - at);
    if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=')
      return std::string(entry.substr(name.size() + 1));
    at = end + 1;
  }
  return std::nullopt;
}

std::optional<proc_status_ids> parse_proc_status(std::string_view status) {
  proc_status_ids ids;
  bool have_uid = false, have_gid = false;
  std::size_t at = 0;
  while (at < status.size()) {
    std::size_t end = status.find('\n', at);
    if (end == std::string_view::npos) end = status.size();
    const std::string_view line = status.substr(at, end - at);
    at = end + 1;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    const auto fields = split_spaces(line.substr(colon + 1));
    if (key == "Uid" || key == "Gid") {
      if (fields.size() < 4) return std::nullopt;
      std::uint32_t v[4];
      for (int k = 0; k < 4; ++k) {
        auto n = number<std::uint32_t>(fields[static_cast<std::size_t>(k)]);
        if (!n) return std::nullopt;
        v[k] = *n;
      }
      if (key == "Uid") {
        ids.uid = v[0], ids.euid = v[1], ids.fsuid = v[3];
        have_uid = true;
      } else {
        ids.gid = v[0], ids.egid = v[1], ids.fsgid = v[3];
        have_gid = true;
      }
    } else if (key == "Groups") {
      for (auto f : fields)
        if (auto g = number<std::uint32_t>(f)) ids.groups.push_back(*g);
    } else if (key == "NSpid" && !fields.empty()) {
      if (auto pid = number<pid_t>(fields.back())) ids.ns_pid = *pid;
    }
  }
  if (!have_uid || !have_gid) return std::nullopt;
  return ids;
}

core::result<core_handler_state> core_handler_status() {
  bool ok = false;
  const std::string text = read_small_file(core_pattern_path, ok);
  if (!ok) return core::status::from_errno(errno, std::string("read ") + core_pattern_path);
  core_handler_state s;
  s.pattern = trimmed(text);
  if (auto ours = parse_core_handler_pattern(s.pattern)) {
    s.installed = true;
    s.handler = ours->handler;
    s.previous = ours->previous;
  }
  return s;
}

core::result<core_handler_state> install_core_handler(const fs::path& handler_path) {
  if (::geteuid() != 0)
    return core::status(core::errc::refused,
                        "installing the core handler needs root: it writes /proc/sys/kernel/core_pattern, and the kernel "
                        "runs the handler as root for every crash on the machine");
  std::error_code ec;
  const fs::path handler = fs::canonical(handler_path, ec);
  if (ec) return core::status(core::errc::invalid_argument, "the handler " + handler_path.string() + ": " + ec.message());
  if (handler.filename() != core_handler_name)
    return core::status(core::errc::invalid_argument,
                        "the handler " + handler.string() + " is not named " + std::string(core_handler_name));
  if (auto s = check_root_only(handler); !s) return s;
  auto before = core_handler_status();
  if (!before) return before.error();
  auto pattern = core_handler_pattern(handler.string(), before->pattern);
  if (!pattern) return pattern.error();
  if (*pattern != before->pattern) {
    if (auto s = write_core_pattern(*pattern); !s) return s;
  }
  if (auto s = self_test(handler); !s) {
    const std::string& restore = before->pattern;
    auto r = write_core_pattern(restore);
    return core::status(s.code(), s.message() + (r ? "; core_pattern is '" + restore + "' again"
                                                   : "; restoring core_pattern '" + restore + "' failed too: " + r.message()));
  }
  return core_handler_status();
}

core::result<core_handler_state> remove_core_handler() {
  auto now = core_handler_status();
  if (!now) return now.error();
  if (!now->installed) return now;
  const std::string previous = now->previous.value_or("core");
  if (auto s = write_core_pattern(previous); !s) return s;
  return core_handler_status();
}

}  // namespace faultline::harness
