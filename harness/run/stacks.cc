#include "harness/run/stacks.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <map>
#include <thread>

#include "faults/preload/protocol.h"
#include "harness/detail/sys.h"
#include "harness/run/dwfl_stacks.h"
#include "harness/run/phases.h"
#include "harness/run/process.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string header(const detail::proc_stat& p, std::string_view via, pid_t faulted_tid = 0) {
  return "=== process " + std::to_string(p.pid) + " (" + p.comm + ") ppid " + std::to_string(p.ppid) + " pgrp " +
         std::to_string(p.pgrp) + " state " + std::string(1, p.state) +
         (faulted_tid != 0 ? " thread " + std::to_string(faulted_tid) : std::string()) + " via " + std::string(via) +
         " ===\n";
}

// `name` in a directory of PATH.
std::optional<fs::path> on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  for (std::size_t pos = 0; pos <= p.size();) {
    auto colon = p.find(':', pos);
    if (colon == std::string::npos) colon = p.size();
    std::string dir = p.substr(pos, colon - pos);
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return fs::path(dir) / name;
    pos = colon + 1;
  }
  return std::nullopt;
}

std::optional<std::string> via_gdb(pid_t pid, std::chrono::milliseconds timeout) {
  // debuginfod would go to the network (and wait for it); -nx keeps user init files out.
  auto env = current_environment();
  set_env(env, "DEBUGINFOD_URLS", std::nullopt);
  // The mappings after the frames: gdb names no module for code with debug info (classify.h).
  auto r = run_tool({"gdb", "-p", std::to_string(pid), "-batch", "-nx", "-iex", "set debuginfod enabled off", "-ex",
                     "set pagination off", "-ex", "thread apply all bt", "-ex", "info proc mappings"},
                    timeout, env);
  if (!r || r->timed_out) return std::nullopt;
  // gdb prints its frames under "Thread N (...)" headers; without one it did not attach.
  auto at = r->output.find("\nThread ");
  if (at == std::string::npos) return std::nullopt;
  return r->output.substr(at + 1);
}

std::optional<std::string> via_eu_stack(const fs::path& program, pid_t pid, std::chrono::milliseconds timeout) {
  // -m: each frame's module (classify skips runtime frames by module); -i: inlined frames, as
  // gdb shows them. debuginfod would go to the network (and wait for it).
  auto env = current_environment();
  set_env(env, "DEBUGINFOD_URLS", std::nullopt);
  auto r = run_tool({program.string(), "-m", "-i", "-p", std::to_string(pid)}, timeout, env, true);
  // Exit 1 means some frames could not be unwound: what was shown is still worth having.
  if (!r || r->timed_out || !WIFEXITED(r->status) || WEXITSTATUS(r->status) > 1) return std::nullopt;
  auto at = r->output.find("PID ");
  if (at == std::string::npos || r->output.find("\nTID ", at) == std::string::npos) return std::nullopt;
  return r->output.substr(at);
}

std::optional<std::string> via_libdwfl(pid_t pid, std::chrono::milliseconds timeout) {
  dwfl_limits limits;
  limits.timeout = timeout;
  auto text = read_process_stacks(pid, limits);
  if (!text) return std::nullopt;
  return std::move(*text);
}

std::string via_proc(pid_t pid) {
  std::string out;
  const std::string base = "/proc/" + std::to_string(pid) + "/task/";
  for (pid_t tid : detail::threads_of(pid)) {
    const std::string t = base + std::to_string(tid);
    auto comm = detail::read_file(t + "/comm", 256);
    auto wchan = detail::read_file(t + "/wchan", 256);
    auto stat = detail::read_file(t + "/stat", 4096);
    char state = '?';
    if (stat) {
      if (auto s = detail::parse_stat(*stat)) state = s->state;
    }
    out += "thread " + std::to_string(tid) + " " + (comm ? trim(*comm) : std::string("?")) + " state " + state +
           " wchan " + (wchan && !wchan->empty() ? trim(*wchan) : std::string("-")) + "\n";
    if (auto ks = detail::read_file(t + "/stack", 1 << 16); ks && !ks->empty()) {
      std::string indented;
      for (std::size_t pos = 0; pos < ks->size();) {
        auto nl = ks->find('\n', pos);
        if (nl == std::string::npos) nl = ks->size();
        indented += "  " + ks->substr(pos, nl - pos) + "\n";
        pos = nl + 1;
      }
      out += indented;
    }
    out += "\n";
  }
  return out;
}

// Whether `pid` has a handler for `sig` (the SigCgt mask of /proc/PID/status): a process that
// inherited phase.PID through fork but exec'd a program without the agent would be killed by
// the signal's default action.
bool catches(pid_t pid, int sig) {
  auto status = detail::read_file("/proc/" + std::to_string(pid) + "/status", 1 << 16);
  if (!status) return false;
  auto at = status->find("\nSigCgt:");
  if (at == std::string::npos) return false;
  unsigned long long mask = std::strtoull(status->c_str() + at + 8, nullptr, 16);
  return sig >= 1 && sig <= 64 && (mask >> (sig - 1)) & 1ULL;
}

// A Python interpreter: its executable is python* (python3, python3.11), or it maps libpython
// (an embedding program).
bool is_python(pid_t pid) {
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  if (!ec && exe.filename().string().rfind("python", 0) == 0) return true;
  auto maps = detail::read_file("/proc/" + std::to_string(pid) + "/maps", 1 << 22);
  return maps && maps->find("/libpython") != std::string::npos;
}

// `py-spy dump`: the Python frames of every thread, from its first "Thread " line on.
std::optional<std::string> via_py_spy(const fs::path& program, pid_t pid, std::chrono::milliseconds timeout) {
  auto r = run_tool({program.string(), "dump", "--full-filenames", "--pid", std::to_string(pid)}, timeout,
                    current_environment(), true);
  if (!r || r->timed_out || !WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) return std::nullopt;
  if (r->output.rfind("Thread ", 0) == 0) return r->output;
  auto at = r->output.find("\nThread ");
  if (at == std::string::npos) return std::nullopt;
  return r->output.substr(at + 1);
}

// Python sections for the interpreters among `procs`, all at once.
std::map<pid_t, std::string> python_sections(const std::vector<detail::proc_stat>& procs,
                                             std::chrono::milliseconds timeout) {
  std::map<pid_t, std::string> out;
  const auto program = py_spy_program();
  if (!program) return out;
  std::vector<std::pair<const detail::proc_stat*, std::future<std::optional<std::string>>>> jobs;
  for (const auto& p : procs)
    if (is_python(p.pid)) jobs.emplace_back(&p, std::async(std::launch::async, via_py_spy, *program, p.pid, timeout));
  for (auto& [p, f] : jobs)
    if (auto text = f.get()) out[p->pid] = header(*p, "py-spy") + *text;
  return out;
}

// Sections for `procs` by the first of `tools` (gdb, eu-stack, libdwfl) that attaches to each; every
// process in parallel, so a tree of a few processes costs one attach time.
void capture_outside(const std::vector<detail::proc_stat>& procs, const std::vector<stack_method>& tools,
                     const stack_options& options, std::optional<faulted_thread> faulted,
                     std::map<pid_t, std::string>& sections) {
  if (tools.empty()) return;
  const std::optional<fs::path> eu_stack = eu_stack_program();
  auto one = [&](const detail::proc_stat* p) -> std::optional<std::string> {
    const pid_t tid = faulted && faulted->pid == p->pid ? faulted->tid : 0;
    for (stack_method t : tools) {
      if (t == stack_method::gdb) {
        if (auto text = via_gdb(p->pid, options.gdb_timeout)) return header(*p, "gdb", tid) + *text;
      } else if (t == stack_method::eu_stack && eu_stack) {
        if (auto text = via_eu_stack(*eu_stack, p->pid, options.eu_stack_timeout))
          return header(*p, "eu-stack", tid) + *text;
      } else if (t == stack_method::libdwfl) {
        if (auto text = via_libdwfl(p->pid, options.libdwfl_timeout)) return header(*p, "libdwfl", tid) + *text;
      }
    }
    return std::nullopt;
  };
  std::vector<std::pair<const detail::proc_stat*, std::future<std::optional<std::string>>>> jobs;
  for (const auto& p : procs) jobs.emplace_back(&p, std::async(std::launch::async, one, &p));
  for (auto& [p, f] : jobs)
    if (auto text = f.get()) sections[p->pid] = std::move(*text);
}

// One section per process, in `procs` order; /proc's view for those without one; a process's
// Python section (`python`) after its own.
core::status write_sections(const std::vector<detail::proc_stat>& procs, const std::map<pid_t, std::string>& sections,
                            std::optional<faulted_thread> faulted, const fs::path& out,
                            const std::map<pid_t, std::string>& python = {}) {
  std::string text;
  auto end_section = [&] {
    if (text.empty() || text.back() != '\n') text += '\n';
    text += '\n';
  };
  for (const auto& p : procs) {
    if (auto it = sections.find(p.pid); it != sections.end()) text += it->second;
    else text += header(p, "proc", faulted && faulted->pid == p.pid ? faulted->tid : 0) + via_proc(p.pid);
    end_section();
    if (auto it = python.find(p.pid); it != python.end()) {
      text += it->second;
      end_section();
    }
  }
  int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return detail::sys_error(errno, "open " + out.string());
  auto s = detail::write_all(fd, text, "write " + out.string());
  ::close(fd);
  return s;
}

}  // namespace

std::string_view to_string(stack_method m) noexcept {
  switch (m) {
    case stack_method::automatic: return "auto";
    case stack_method::gdb: return "gdb";
    case stack_method::eu_stack: return "eu-stack";
    case stack_method::libdwfl: return "libdwfl";
    case stack_method::agent: return "agent";
    case stack_method::proc: return "proc";
    case stack_method::none: return "none";
  }
  return "auto";
}

std::optional<stack_method> stack_method_from_string(std::string_view s) noexcept {
  for (auto m : {stack_method::automatic, stack_method::gdb, stack_method::eu_stack, stack_method::libdwfl,
                 stack_method::agent, stack_method::proc, stack_method::none})
    if (to_string(m) == s) return m;
  return std::nullopt;
}

bool gdb_available() {
  static const bool found = [] {
    const char* hidden = std::getenv(gdb_env);
    return !(hidden && std::string_view(hidden) == "none") && on_path("gdb").has_value();
  }();
  return found;
}

std::optional<fs::path> eu_stack_program() {
  if (const char* named = std::getenv(eu_stack_env); named && *named) {
    std::error_code ec;
    if (fs::is_regular_file(named, ec) && ::access(named, X_OK) == 0) return fs::path(named);
  }
  return on_path("eu-stack");
}

std::optional<fs::path> py_spy_program() {
  if (const char* named = std::getenv(py_spy_env); named && *named) {
    std::error_code ec;
    if (fs::is_regular_file(named, ec) && ::access(named, X_OK) == 0) return fs::path(named);
  }
  return on_path("py-spy");
}

bool outside_capture_available() { return true; }  // libdwfl is linked in

core::status capture_stacks(const std::vector<detail::proc_stat>& procs, const fs::path& run_dir, const fs::path& out,
                            const stack_options& options) {
  const stack_method m = options.method;
  std::map<pid_t, std::string> sections;
  if (m == stack_method::none) return {};

  std::vector<stack_method> tools;
  if (m == stack_method::gdb || (m == stack_method::automatic && gdb_available())) tools.push_back(stack_method::gdb);
  if (m == stack_method::eu_stack || (m == stack_method::automatic && eu_stack_program()))
    tools.push_back(stack_method::eu_stack);
  if (m == stack_method::libdwfl || m == stack_method::automatic) tools.push_back(stack_method::libdwfl);
  capture_outside(procs, tools, options, std::nullopt, sections);

  // The agent: signal every agent-carrying process at once, then collect their answers.
  if (m == stack_method::agent || m == stack_method::automatic) {
    std::vector<const detail::proc_stat*> asked;
    const auto carriers = read_phases(run_dir);  // the processes that carry the agent
    for (const auto& p : procs) {
      if (sections.count(p.pid)) continue;
      const std::string pid = std::to_string(p.pid);
      if (!carriers.count(p.pid) || !catches(p.pid, agent::stack_dump_signal())) continue;
      fs::remove(run_dir / (agent::stacks_file_prefix + pid));
      if (::kill(p.pid, agent::stack_dump_signal()) == 0) asked.push_back(&p);
    }
    // A dump is complete when its closing "end" line is there.
    auto deadline = std::chrono::steady_clock::now() + options.agent_wait;
    auto pause = std::chrono::milliseconds(1);
    while (!asked.empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
      std::erase_if(asked, [&](const detail::proc_stat* p) {
        auto text = detail::read_file(run_dir / (agent::stacks_file_prefix + std::to_string(p->pid)), 1 << 22);
        const std::string end = std::string("\n") + agent::stacks_end_line + "\n";
        if (!text || text->size() < end.size() || text->compare(text->size() - end.size(), end.size(), end) != 0) return false;
        sections[p->pid] = header(*p, "agent") + *text;
        return true;
      });
    }
  }
  // Python frames come in automatic mode, beside whatever gave the machine frames.
  std::map<pid_t, std::string> python;
  if (m == stack_method::automatic) python = python_sections(procs, options.eu_stack_timeout);
  return write_sections(procs, sections, std::nullopt, out, python);
}

core::status capture_stacks_outside(const std::vector<detail::proc_stat>& procs, const fs::path& out,
                                    const stack_options& options, std::optional<faulted_thread> faulted) {
  std::vector<stack_method> tools;
  switch (options.method) {
    case stack_method::automatic:
      if (gdb_available()) tools.push_back(stack_method::gdb);
      if (eu_stack_program()) tools.push_back(stack_method::eu_stack);
      tools.push_back(stack_method::libdwfl);
      break;
    case stack_method::gdb:
      if (!gdb_available()) return core::status(core::errc::unavailable, "gdb is not installed");
      tools.push_back(stack_method::gdb);
      break;
    case stack_method::eu_stack:
      if (!eu_stack_program())
        return core::status(core::errc::unavailable, std::string("eu-stack is not installed (nor named by ") +
                                                         eu_stack_env + ")");
      tools.push_back(stack_method::eu_stack);
      break;
    case stack_method::libdwfl:
      tools.push_back(stack_method::libdwfl);
      break;
    default:
      return core::status(core::errc::invalid_argument,
                          "stacks are captured out of process with gdb, eu-stack or libdwfl, not " +
                              std::string(to_string(options.method)));
  }
  std::map<pid_t, std::string> sections;
  capture_outside(procs, tools, options, faulted, sections);
  return write_sections(procs, sections, faulted, out);
}

}  // namespace faultline::harness
