#include "harness/run/core_dump.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "faults/preload/protocol.h"
#include "harness/detail/sys.h"
#include "harness/run/core_handler/core_handler.h"
#include "harness/run/core_keeper.h"
#include "harness/run/dwfl_stacks.h"
#include "harness/run/process.h"
#include "harness/run/stacks.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

constexpr rlim_t core_limit_bytes = rlim_t{4} << 30;
constexpr const char* default_coredump_filter = "0x11";  // anonymous private memory, ELF headers
constexpr auto gdb_timeout = std::chrono::seconds(60);
// How long a crashed run waits for faultline-core-handler to finish its core (see capture_core).
constexpr auto handler_wait = std::chrono::seconds(10);

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string core_pattern_text() {
  auto pattern = detail::read_file("/proc/sys/kernel/core_pattern", 4096);
  return pattern ? trimmed(*pattern) : std::string();
}

// The file pattern that names the cores of processes outside a run: core_pattern itself, or the
// previous pattern of faultline-core-handler's; nullopt when cores do not go to files.
std::optional<std::string> file_pattern(const std::string& pattern) {
  if (auto ours = parse_core_handler_pattern(pattern)) return ours->previous.value_or("core");
  if (pattern.empty() || pattern[0] == '|' || pattern[0] == '@') return std::nullopt;
  return pattern;
}

// The kernel does not wait for a pipe handler (core_pipe_limit 0): a crashed process ends once
// the rest of its core fits in the pipe, while the handler may still write it and rename
// core.PID.part to core.PID.
void wait_for_handler(const fs::path& run_dir) {
  const auto deadline = std::chrono::steady_clock::now() + handler_wait;
  const std::string parts = (run_dir / "core.*.part").string();
  for (;;) {
    glob_t found{};
    const bool writing = ::glob(parts.c_str(), GLOB_NOSORT, nullptr, &found) == 0 && found.gl_pathc > 0;
    ::globfree(&found);
    if (!writing || std::chrono::steady_clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<std::string> gdb_argv(const std::vector<std::string>& tail) {
  // debuginfod would go to the network (and wait for it); -nx keeps user init files out.
  std::vector<std::string> argv = {"gdb", "-batch", "-nx", "-iex", "set debuginfod enabled off",
                                   "-ex", "set pagination off"};
  argv.insert(argv.end(), tail.begin(), tail.end());
  return argv;
}

bool write_whole_file(const char* path, const std::string& text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = detail::write_all(fd, text, path).is_ok();
  return ::close(fd) == 0 && ok;
}

// The one file every core of a process in `cwd` is written to, when core_pattern names one
// (no specifier, no core_uses_pid): "core" -> CWD/core. nullopt when each core has its own name
// or cores do not go to files.
std::optional<fs::path> shared_core_name(const std::string& pattern_text, bool uses_pid, const fs::path& cwd) {
  const auto files = file_pattern(pattern_text);
  if (!files || files->empty() || uses_pid || files->find('%') != std::string::npos) return std::nullopt;
  const fs::path target = fs::path(*files).is_absolute() ? fs::path(*files) : cwd / *files;
  if (target.filename().empty()) return std::nullopt;
  return target;
}

}  // namespace

core::status keep_cores_apart(const fs::path& cwd) {
  auto uses_pid = detail::read_file("/proc/sys/kernel/core_uses_pid", 64);
  const auto place = shared_core_name(core_pattern_text(), uses_pid && trimmed(*uses_pid) == "1", cwd);
  if (!place) return {};
  return core_keeper::instance().watch(place->parent_path(), place->filename().string());
}

std::string enable_core_capture() {
  static const std::string why_not = [] () -> std::string {
    auto pattern = detail::read_file("/proc/sys/kernel/core_pattern", 4096);
    if (!pattern) return "cannot read /proc/sys/kernel/core_pattern";
    const std::string text = trimmed(*pattern);
    // faultline-core-handler hands a run's core to the run's directory: cores can be used.
    if (!text.empty() && text[0] == '|' && !parse_core_handler_pattern(text)) return "core_pattern pipes cores to " + text;
    if (!text.empty() && text[0] == '@') return "core_pattern sends cores to the socket " + text.substr(1);
    if (text.empty()) return "core_pattern is empty (no cores are written)";
    rlimit lim{};
    if (::getrlimit(RLIMIT_CORE, &lim) != 0) return "getrlimit(RLIMIT_CORE) failed";
    if (lim.rlim_max == 0) return "RLIMIT_CORE's hard limit is 0";
    const rlim_t want = lim.rlim_max == RLIM_INFINITY ? core_limit_bytes : std::min(lim.rlim_max, core_limit_bytes);
    if (lim.rlim_cur < want) {
      lim.rlim_cur = want;
      if (::setrlimit(RLIMIT_CORE, &lim) != 0) return "setrlimit(RLIMIT_CORE) failed";
    }
    // What the kernel dumps, inherited by every run like the limit: the stacks need anonymous
    // private memory (stacks, heap, written data) and the first page of each ELF mapping (its
    // headers, by which libdwfl finds the modules); shared memory and file pages are left out. A
    // core holds its process (and a CUDA process's context) until it is written, and that delay
    // changes races beside it: on an H100, 6 copies of an exit race at once crashed 25/150 without
    // cores, 70/150 with the kernel's default filter (0x33), 45/150 with 0x1.
    // FAULTLINE_COREDUMP_FILTER (hex, as /proc/PID/coredump_filter takes it) overrides it.
    const char* filter = std::getenv("FAULTLINE_COREDUMP_FILTER");
    const std::string value = filter && *filter ? filter : default_coredump_filter;
    if (!write_whole_file("/proc/self/coredump_filter", value + "\n"))
      return "cannot write " + value + " to /proc/self/coredump_filter (FAULTLINE_COREDUMP_FILTER)";
    return {};
  }();
  return why_not;
}

bool core_names_are_unique() {
  auto pattern = detail::read_file("/proc/sys/kernel/core_pattern", 4096);
  auto uses_pid = detail::read_file("/proc/sys/kernel/core_uses_pid", 64);
  if (uses_pid && trimmed(*uses_pid) == "1") return true;
  if (!pattern) return false;
  if (parse_core_handler_pattern(*pattern)) return true;  // RUN_DIR/core.PID
  for (const char* spec : {"%p", "%P", "%i", "%I", "%t"})
    if (pattern->find(spec) != std::string::npos) return true;
  return false;
}

std::string core_destination_problem(const fs::path& cwd) {
  auto pattern_text = detail::read_file("/proc/sys/kernel/core_pattern", 4096);
  if (!pattern_text) return "cannot read /proc/sys/kernel/core_pattern";
  const std::string pattern = trimmed(*pattern_text);
  // With faultline-core-handler a run's core goes to its run directory, whatever cwd holds.
  if (pattern.empty() || pattern[0] == '|' || pattern[0] == '@') return {};  // or enable_core_capture says why
  const fs::path target = fs::path(pattern).is_absolute() ? fs::path(pattern) : cwd / pattern;
  // The directory part must exist and be writable; specifiers there cannot be checked ahead.
  const fs::path dir = target.parent_path();
  if (dir.string().find('%') == std::string::npos) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      return "core_pattern '" + pattern + "' puts cores in " + dir.string() + ", which is not a directory; " + core_handler_hint;
    if (::access(dir.c_str(), W_OK) != 0)
      return "cores would go to " + dir.string() + ", which is not writable; " + core_handler_hint;
  }
  // A fixed file name that is a directory here ("core" in a source tree with a core/ folder).
  auto uses_pid = detail::read_file("/proc/sys/kernel/core_uses_pid", 64);
  const bool pid_appended = uses_pid && trimmed(*uses_pid) == "1";
  if (pattern.find('%') == std::string::npos && !pid_appended) {
    std::error_code ec;
    if (fs::is_directory(target, ec))
      return target.string() + " is a directory, so the kernel cannot write a core there (core_pattern '" + pattern +
             "'); run from another directory, or " + core_handler_hint;
  }
  return {};
}

std::string core_glob(const std::string& pattern_text, bool uses_pid, const fs::path& cwd) {
  // Outside a run, faultline-core-handler writes a core where its previous pattern would have.
  const std::string pattern = file_pattern(pattern_text).value_or(pattern_text);
  std::string out;
  bool has_pid = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '%' && i + 1 < pattern.size()) {
      const char spec = pattern[++i];
      if (spec == '%') {
        out += '%';
        continue;
      }
      has_pid |= spec == 'p' || spec == 'P';
      if (out.empty() || out.back() != '*') out += '*';
      continue;
    }
    if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';  // literal in the glob
    out += c;
  }
  if (uses_pid && !has_pid) out += ".*";
  if (out.empty() || out[0] != '/') out = (cwd / out).string();
  return out;
}

core_info parse_core_info(const std::string& text) {
  core_info info;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (auto at = line.find("Core was generated by `"); at != std::string::npos) {
      std::string cmd = line.substr(at + 23);
      if (auto end = cmd.rfind('\''); end != std::string::npos) cmd.resize(end);
      info.executable = cmd.substr(0, cmd.find(' '));
    } else if (auto p = line.find("process "); p != std::string::npos && line.find('*') != std::string::npos &&
               info.pid == 0) {
      info.pid = static_cast<pid_t>(std::strtol(line.c_str() + p + 8, nullptr, 10));  // "* 1 process N ..."
    } else if (auto c = line.find("[Current thread is "); c != std::string::npos) {
      if (auto lwp = line.find("LWP ", c); lwp != std::string::npos)
        info.thread = static_cast<pid_t>(std::strtol(line.c_str() + lwp + 4, nullptr, 10));
    }
  }
  if (info.thread == 0) {
    // No "[Current thread is ...]" (gdb omits it for a single thread): the faulting thread's
    // frame #0 is printed once before the threads, and again as the first frame of its thread.
    const auto threads_at = text.find("\nThread ");
    const auto first = text.find("\n#0 ");
    if (threads_at != std::string::npos && first != std::string::npos && first < threads_at) {
      const std::string frame = text.substr(first + 1, text.find('\n', first + 1) - first - 1);
      for (auto at = threads_at; at != std::string::npos; at = text.find("\nThread ", at + 1)) {
        const auto eol = text.find('\n', at + 1);
        if (eol == std::string::npos) break;
        const std::string header = text.substr(at + 1, eol - at - 1);
        if (text.compare(eol + 1, frame.size(), frame) != 0) continue;
        if (auto lwp = header.find("LWP "); lwp != std::string::npos)
          info.thread = static_cast<pid_t>(std::strtol(header.c_str() + lwp + 4, nullptr, 10));
        break;
      }
    }
  }
  return info;
}

core::status capture_core(const std::vector<pid_t>& pids, const fs::path& cwd,
                          std::chrono::system_clock::time_point since, const fs::path& out) {
  return capture_core(pids, cwd, fs::path(), since, out);
}

namespace {

// A core file that may be the run's: where it is, and the keeper's descriptor when the keeper
// holds it (core_keeper.h: a shared name, replaced by later crashes).
struct core_candidate {
  fs::path path;
  std::optional<core_keeper::held_core> held;

  // Read or not, the run's core leaves the directory (and the keeper) once looked at.
  void forget() {
    std::error_code ec;
    if (held) {
      core_keeper::instance().release(*held, true);
      held.reset();
    } else {
      fs::remove(path, ec);
    }
  }
};

// The cores one capture considers: the keeper's first, then the files the globs find; a file
// both hold is read through the keeper. The keeper's descriptors no one claimed go back with it.
struct core_candidates {
  std::vector<core_candidate> list;
  std::size_t held_count = 0;

  core_candidates() = default;
  core_candidates(const core_candidates&) = delete;
  core_candidates& operator=(const core_candidates&) = delete;
  ~core_candidates() {
    for (auto& k : list)
      if (k.held) core_keeper::instance().release(*k.held, false);
  }

  void add_held(const std::optional<fs::path>& place) {
    if (place)
      for (auto& h : core_keeper::instance().held(place->parent_path())) list.push_back({h.path, h});
    held_count = list.size();
  }

  // The regular files of the harness's user that `glob_text` finds, modified at `since_s` or later.
  void add_found(const std::string& glob_text, std::time_t since_s) {
    glob_t found{};
    if (::glob(glob_text.c_str(), GLOB_NOSORT, nullptr, &found) == 0) {
      for (std::size_t i = 0; i < found.gl_pathc; ++i) {
        const fs::path path = found.gl_pathv[i];
        struct stat st {};
        if (path.extension() == ".part") continue;
        if (std::any_of(list.begin(), list.end(), [&](const core_candidate& c) { return c.path == path; })) continue;
        if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_mtime < since_s || st.st_uid != ::getuid()) continue;
        const bool kept = std::any_of(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(held_count),
                                      [&](const core_candidate& c) { return c.held->device == st.st_dev && c.held->inode == st.st_ino; });
        if (!kept) list.push_back({path, std::nullopt});
      }
    }
    ::globfree(&found);
  }
};

// The program, from the command line the core recorded ("Core was generated by" in gdb):
// libdwfl needs it only when the core's NT_FILE note does not name it; gdb always does.
fs::path program_of(const core_identity& id, const fs::path& cwd) {
  std::error_code ec;
  fs::path exe = id.arguments.substr(0, id.arguments.find(' '));
  if (!exe.empty() && exe.is_relative()) exe = cwd / exe;
  if (!exe.empty() && !fs::is_regular_file(exe, ec)) exe.clear();
  return exe;
}

// The stacks section of `core` for crash_stacks.txt: libdwfl's, else gdb's.
core::result<std::string> core_stacks_section(const fs::path& core, const core_identity& id, const fs::path& exe) {
  const std::string head =
      "=== process " + std::to_string(id.pid) + " (core) thread " + std::to_string(id.crashed_tid) + " via ";
  auto stacks = read_core_stacks(core, exe);
  if (stacks && stacks->frames > 0) return head + "libdwfl ===\n" + stacks->text;
  const std::string dwfl_failed = stacks ? "libdwfl found no frame in " + core.string() : stacks.error().message();
  if (!gdb_available()) return core::status(core::errc::unavailable, dwfl_failed);
  auto env = current_environment();
  set_env(env, "DEBUGINFOD_URLS", std::nullopt);
  std::vector<std::string> tail = {"-ex", "thread apply all bt", "-ex", "info proc mappings"};
  if (!exe.empty()) tail.push_back(exe.string());
  tail.insert(tail.end(), {"-c", core.string()});
  auto gdb = run_tool(gdb_argv(tail), gdb_timeout, env);
  const auto at = gdb && !gdb->timed_out ? gdb->output.find("\nThread ") : std::string::npos;
  if (at == std::string::npos) return core::status(core::errc::unavailable, dwfl_failed + "; gdb could not read it either");
  return head + "gdb ===\n" + gdb->output.substr(at + 1);
}

}  // namespace

core::status capture_core(const std::vector<pid_t>& pids, const fs::path& cwd, const fs::path& run_dir,
                          std::chrono::system_clock::time_point since, const fs::path& out) {
  run_cores run;
  run.pids = pids;
  return claim_cores(run, cwd, run_dir, since, out);
}

core::status claim_cores(const run_cores& run, const fs::path& cwd, const fs::path& run_dir,
                         std::chrono::system_clock::time_point since, const fs::path& out) {
  const std::string pattern = core_pattern_text();
  auto uses_pid_text = detail::read_file("/proc/sys/kernel/core_uses_pid", 64);
  const bool uses_pid = uses_pid_text && trimmed(*uses_pid_text) == "1";
  const bool handler = parse_core_handler_pattern(pattern).has_value();
  const auto files = file_pattern(pattern);
  if (!handler && !files) return core::status(core::errc::not_found, "no core file: core_pattern is not a file name");
  std::vector<std::string> globs;
  if (handler && !run_dir.empty()) {
    wait_for_handler(run_dir);
    globs.push_back((run_dir / "core.*").string());  // core.PID, the pid in the core's notes decides
  }
  // Where the run's processes stood: its directory and, where cores follow the process, every
  // directory one of them recorded (cwd.PID, protocol.h).
  std::vector<fs::path> places = {cwd};
  if (files && !run_dir.empty() && core_home(cwd))
    for (auto& d : recorded_directories(run_dir))
      if (d != cwd) places.push_back(std::move(d));
  if (files)
    for (const auto& place : places) globs.push_back(core_glob(*files, uses_pid, place));
  core_candidates candidates;
  for (const auto& place : places) candidates.add_held(shared_core_name(pattern, uses_pid, place));
  const auto since_s = std::chrono::system_clock::to_time_t(since) - 1;
  for (const auto& glob_text : globs) candidates.add_found(glob_text, since_s);
  if (candidates.list.empty()) {
    if (!run.read) return {};
    std::string where;
    for (const auto& g : globs) where += (where.empty() ? "" : " or ") + g;
    return core::status(core::errc::not_found, "no core file matches " + where);
  }
  std::vector<pid_t> pids = run.pids;
  bool asked = !run.more_pids;
  auto listed = [&](pid_t p) {
    if (p == 0) return false;
    if (std::find(pids.begin(), pids.end(), p) != pids.end()) return true;
    if (asked) return false;
    asked = true;
    const auto more = run.more_pids();
    pids.insert(pids.end(), more.begin(), more.end());
    return std::find(pids.begin(), pids.end(), p) != pids.end();
  };
  std::optional<core::status> read;
  for (auto& cand : candidates.list) {
    // Whose core it is, from its notes: another run's (or no core at all) is left alone.
    auto id = read_core_identity(cand.path);
    if (!id || id->pid == 0) continue;
    const bool known = listed(id->pid);
    if (!known && (run.group <= 0 || id->group != run.group)) continue;
    // The run's: read (the first core of a known process, when asked), and gone either way.
    if (run.read && !read && known) {
      auto section = core_stacks_section(cand.path, *id, program_of(*id, cwd));
      if (!section) {
        read = section.error();
      } else {
        std::ofstream file(out, std::ios::app);
        file << *section << "\n";
        read = file ? core::status() : core::status(core::errc::io_error, "cannot write " + out.string());
      }
    }
    cand.forget();
  }
  if (!run.read) return {};
  return read ? *read : core::status(core::errc::not_found, "no core file of this run");
}

std::optional<fs::path> core_home(const fs::path& cwd) {
  const std::string pattern = core_pattern_text();
  // Only a plain relative name ("core", "core.%p") follows the process; a pipe, a socket, an
  // absolute pattern or one with a directory part does not.
  if (pattern.empty() || pattern[0] == '|' || pattern[0] == '@' || pattern.find('/') != std::string::npos) return std::nullopt;
  std::error_code ec;
  fs::path home = fs::weakly_canonical(cwd, ec);
  if (ec || home.empty()) return std::nullopt;
  return home;
}

core::status follow_cores(const fs::path& run_dir) {
  auto uses_pid = detail::read_file("/proc/sys/kernel/core_uses_pid", 64);
  // Only where every core of a directory has one name must a core be held as it appears.
  const auto place = shared_core_name(core_pattern_text(), uses_pid && trimmed(*uses_pid) == "1", run_dir);
  if (!place) return core::status(core::errc::not_found, "cores have names of their own");
  return core_keeper::instance().follow(run_dir, place->filename().string());
}

std::vector<fs::path> recorded_directories(const fs::path& run_dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  const std::string prefix = agent::cwd_file_prefix;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0 || it->path().extension() == ".part") continue;
    auto text = detail::read_file(it->path().string(), 4096);
    if (!text || text->empty() || (*text)[0] != '/') continue;
    const fs::path dir = trimmed(*text);
    if (std::find(out.begin(), out.end(), dir) == out.end()) out.push_back(dir);
  }
  return out;
}

}  // namespace faultline::harness
