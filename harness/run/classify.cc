#include "harness/run/classify.h"
#include "harness/run/elf_functions.h"

#include <cxxabi.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "faults/preload/protocol.h"
#include "harness/detail/sys.h"
#include "harness/run/phases.h"
#include "harness/run/process.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  for (std::size_t pos = 0; pos < text.size();) {
    auto nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string_view basename(std::string_view path) {
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The decimal number at the start of `s` (0 when there is none).
pid_t leading_int(std::string_view s) {
  pid_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

bool is_trampoline(const frame& f) {
  return f.function == "__restore_rt" || f.function == "<signal handler called>" || f.function == "__kernel_rt_sigreturn";
}

bool unnamed(const frame& f) { return f.function.empty() || f.function == "??"; }

// The agent leaves a name mangled where it could not demangle safely (in a signal handler).
std::string demangle(std::string_view name) {
  std::string s(name);
  if (s.rfind("_Z", 0) != 0) return s;
  int status = 0;
  char* d = abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !d) return s;
  std::string out(d);
  std::free(d);
  return out;
}

// "#K ADDR MODULE+OFFSET FUNCTION" (crash.PID and agent stacks.PID).
std::optional<frame> parse_agent_frame(std::string_view line) {
  if (!starts_with(line, "#")) return std::nullopt;
  auto sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return std::nullopt;
  auto sp2 = line.find(' ', sp1 + 1);  // after ADDR
  if (sp2 == std::string_view::npos) return std::nullopt;
  auto sp3 = line.find(' ', sp2 + 1);  // after MODULE+OFFSET
  std::string_view where = line.substr(sp2 + 1, sp3 == std::string_view::npos ? std::string_view::npos : sp3 - sp2 - 1);
  frame f;
  f.function = sp3 == std::string_view::npos ? "??" : strip_parameters(demangle(line.substr(sp3 + 1)));
  auto plus = where.rfind('+');
  if (plus != std::string_view::npos) {
    f.module = std::string(where.substr(0, plus));
    std::string_view off = where.substr(plus + 1);
    if (starts_with(off, "0x")) off.remove_prefix(2);
    f.has_offset = std::from_chars(off.data(), off.data() + off.size(), f.offset, 16).ec == std::errc();
  } else {
    f.module = std::string(where);
  }
  return f;
}

// The text after "#K" and its spaces; nullopt when the line is not a frame line.
std::optional<std::string_view> after_frame_number(std::string_view line) {
  if (!starts_with(line, "#")) return std::nullopt;
  std::size_t p = 1;
  while (p < line.size() && std::isdigit(static_cast<unsigned char>(line[p]))) ++p;
  if (p == 1) return std::nullopt;
  while (p < line.size() && line[p] == ' ') ++p;
  return line.substr(p);
}

// gdb: "#3  0x000055.. in ns::sleeper (n=...) at t.cc:3", "#0  main () at x.cc:4",
// "#1  0x7f.. in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6", and without debug info
// "#2  0x55.. in (anonymous namespace)::touch(int) ()" (the name carries its parameter types).
std::optional<frame> parse_gdb_frame(std::string_view line) {
  auto rest_opt = after_frame_number(line);
  if (!rest_opt) return std::nullopt;
  std::string_view rest = *rest_opt;
  frame f;
  if (starts_with(rest, "0x")) {
    auto in = rest.find(" in ");
    if (in == std::string_view::npos) return std::nullopt;
    std::string_view hex = rest.substr(2, in - 2);
    std::from_chars(hex.data(), hex.data() + hex.size(), f.address, 16);
    rest.remove_prefix(in + 4);
  }
  if (auto from = rest.rfind(" from "); from != std::string_view::npos) {
    f.module = std::string(trim(rest.substr(from + 6)));
    rest = rest.substr(0, from);
  } else if (auto at = rest.rfind(") at "); at != std::string_view::npos) {
    rest = rest.substr(0, at + 1);
  }
  // The argument list is the last parenthesised group, after a space.
  rest = trim(rest);
  if (!rest.empty() && rest.back() == ')') {
    int depth = 0;
    for (std::size_t i = rest.size(); i-- > 0;) {
      if (rest[i] == ')') {
        ++depth;
      } else if (rest[i] == '(' && --depth == 0) {
        if (i > 0 && rest[i - 1] == ' ') rest = rest.substr(0, i - 1);
        break;
      }
    }
  }
  f.function = strip_parameters(demangle(trim(rest)));
  if (f.function.empty()) f.function = "??";
  return f;
}

// eu-stack: "#0  0x00007f.. clock_nanosleep@GLIBC_2.2.5 - /usr/lib/x86_64-linux-gnu/libc.so.6"
// (" - MODULE" with -m; "- 1 " before the name with -a; no name when it has no symbol).
std::optional<frame> parse_eu_stack_frame(std::string_view line) {
  auto rest_opt = after_frame_number(line);
  if (!rest_opt || !starts_with(*rest_opt, "0x")) return std::nullopt;
  std::string_view rest = *rest_opt;
  auto sp = rest.find(' ');
  rest = sp == std::string_view::npos ? std::string_view() : trim(rest.substr(sp));
  if (starts_with(rest, "- 1") && (rest.size() == 3 || rest[3] == ' ')) rest = trim(rest.substr(3));
  frame f;
  std::string padded = " " + std::string(rest);
  if (auto dash = padded.rfind(" - ");
      dash != std::string::npos && dash + 3 < padded.size() && (padded[dash + 3] == '/' || padded[dash + 3] == '[')) {
    f.module = padded.substr(dash + 3);
    padded.resize(dash);
  }
  std::string_view name = trim(padded);
  name = name.substr(0, name.find('@'));  // symbol version: "clock_nanosleep@GLIBC_2.2.5"
  f.function = name.empty() ? "??" : strip_parameters(demangle(name));
  return f;
}

// One line of gdb's `info proc mappings` that maps a file:
// "      0x7f..000     0x7f..000   0x156000    0x26000  r-xp   /usr/lib/x86_64-linux-gnu/libc.so.6"
// (gdb 12 and older print no permissions column).
struct mapping {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::string path;
};

std::optional<mapping> parse_mapping(std::string_view line) {
  std::string_view rest = trim(line);
  std::uint64_t fields[4] = {};
  for (auto& v : fields) {
    if (!starts_with(rest, "0x")) return std::nullopt;
    auto sp = rest.find(' ');
    if (sp == std::string_view::npos) return std::nullopt;
    std::string_view hex = rest.substr(2, sp - 2);
    if (std::from_chars(hex.data(), hex.data() + hex.size(), v, 16).ec != std::errc()) return std::nullopt;
    rest = trim(rest.substr(sp));
  }
  if (!rest.empty() && rest.front() != '/') {  // permissions
    auto sp = rest.find(' ');
    rest = sp == std::string_view::npos ? std::string_view() : trim(rest.substr(sp));
  }
  if (rest.empty() || rest.front() != '/' || fields[1] <= fields[0]) return std::nullopt;
  return mapping{fields[0], fields[1], std::string(rest)};
}

// gdb names no module for a frame of a module with debug info (faultline's preloaded libraries
// among them) nor for one of a stripped program: the section's mappings, where the capture
// printed them, say which file holds each address. Offsets are from the file's lowest mapping,
// its load base, as the other formats give them.
void place_in_modules(std::vector<thread_stack>& threads, std::size_t first, const std::vector<mapping>& maps) {
  if (maps.empty()) return;
  std::map<std::string_view, std::uint64_t> base;
  for (const auto& m : maps) {
    auto [it, added] = base.emplace(m.path, m.start);
    if (!added) it->second = std::min(it->second, m.start);
  }
  for (std::size_t t = first; t < threads.size(); ++t) {
    auto& frames = threads[t].frames;
    for (std::size_t i = 0; i < frames.size(); ++i) {
      frame& f = frames[i];
      // gdb prints an address only on the innermost of the frames inlined at one pc: the
      // frames after it without one are the functions it was inlined into, at the same pc.
      if (f.address == 0 && f.module.empty() && i > 0 && frames[i - 1].address != 0) f.address = frames[i - 1].address;
      if (!f.module.empty() || f.address == 0) continue;
      for (const auto& m : maps) {
        if (f.address < m.start || f.address >= m.end) continue;
        f.module = m.path;
        f.offset = f.address - base[m.path];
        f.has_offset = true;
        break;
      }
    }
  }
}

enum class section_format { unknown, gdb, eu_stack, agent, proc, py_spy };

section_format format_named(std::string_view method) {
  if (method == "gdb") return section_format::gdb;
  if (method == "eu-stack" || method == "libdwfl") return section_format::eu_stack;  // dwfl_stacks.h
  if (method == "agent") return section_format::agent;
  if (method == "proc") return section_format::proc;
  if (method == "py-spy") return section_format::py_spy;
  return section_format::unknown;
}

// "=== process PID (COMM) [ppid P pgrp G state S] [thread TID] via METHOD ===".
struct section_head {
  pid_t pid = 0;
  pid_t faulted_tid = 0;
  section_format format = section_format::unknown;
};

std::optional<section_head> parse_section_head(std::string_view l) {
  constexpr std::string_view open = "=== process ";
  if (!starts_with(l, open)) return std::nullopt;
  section_head h;
  h.pid = leading_int(l.substr(open.size()));
  auto via = l.rfind(" via ");
  if (via == std::string_view::npos) return h;
  std::string_view method = l.substr(via + 5);
  h.format = format_named(method.substr(0, method.find(' ')));
  // The fields after COMM: COMM may hold anything, the fields hold no ')'.
  std::string_view fields = l.substr(0, via);
  auto close = fields.rfind(')');
  if (close != std::string_view::npos) {
    fields.remove_prefix(close + 1);
    if (auto t = fields.find(" thread "); t != std::string_view::npos) h.faulted_tid = leading_int(fields.substr(t + 8));
  }
  return h;
}

// py-spy (`py-spy dump --full-filenames`): "    wait_for_child (/srv/t/test_ipc.py:12)" under
// "Thread 1001 (idle): "MainThread"". The module is the source file.
std::optional<frame> parse_py_spy_frame(std::string_view l) {
  if (!starts_with(l, "    ")) return std::nullopt;
  l = trim(l);
  auto open = l.rfind(" (");
  if (open == std::string_view::npos || open == 0 || !ends_with(l, ")")) return std::nullopt;
  frame f;
  f.function = std::string(l.substr(0, open));
  std::string_view where = l.substr(open + 2, l.size() - open - 3);
  f.module = std::string(where.substr(0, where.rfind(':')));
  return f;
}

// gdb: "Thread 2 (Thread 0x7f01 (LWP 1001) "worker"):", or "(LWP 1001)" alone from a core, or
// "(process 1000)" for a process gdb saw no threads in.
pid_t gdb_thread_id(std::string_view l) {
  if (auto lwp = l.find("(LWP "); lwp != std::string_view::npos) return leading_int(l.substr(lwp + 5));
  if (auto proc = l.find("(process "); proc != std::string_view::npos) return leading_int(l.substr(proc + 9));
  return 0;
}

// A Python source file of the interpreter's own library (".../lib/python3.11/threading.py"),
// not of a package installed beside it: py-spy's frames of the runtime, as libc's are gdb's.
bool python_library(std::string_view module) {
  if (!ends_with(module, ".py")) return false;
  auto lib = module.find("/lib/python");
  if (lib == std::string_view::npos) return false;
  std::string_view rest = module.substr(lib);
  return rest.find("/site-packages/") == std::string_view::npos && rest.find("/dist-packages/") == std::string_view::npos;
}

bool system_module(std::string_view module) {
  static constexpr std::string_view prefixes[] = {
      "libc.so", "libc-", "libm.so", "libm-", "libmvec", "libpthread", "libdl.so", "libdl-", "librt.so",
      "librt-", "libstdc++", "libgcc_s", "ld-linux", "ld-2.", "ld.so", "ld64.so", "linux-vdso", "linux-gate",
      "[vdso", "libcuda.so", "libcudart", "libcupti", "libnvidia-", "libasan", "libtsan", "libubsan",
      "liblsan", "libhwasan"};
  std::string_view mod = basename(module);
  for (std::string_view p : prefixes)
    if (starts_with(mod, p)) return true;
  return python_library(module) || faultline_module(module);
}

// The C library's calls that a blocked or starting thread sits in, for frames without a module:
// gdb prints "epoll_wait (epfd=3, ...) at ../sysdeps/unix/sysv/linux/epoll_wait.c:30", with no
// "from libc.so.6", when libc has debug info.
bool libc_function(std::string_view n) {
  static const std::set<std::string_view> names = {
      "read", "write", "readv", "writev", "pread", "pread64", "pwrite", "pwrite64", "recv", "recvfrom", "recvmsg",
      "recvmmsg", "send", "sendto", "sendmsg", "accept", "accept4", "connect", "poll", "ppoll", "select", "pselect",
      "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2", "nanosleep", "clock_nanosleep", "sleep", "usleep",
      "pause", "sigsuspend", "sigwait", "sigwaitinfo", "sigtimedwait", "wait", "waitpid", "wait3", "wait4", "waitid",
      "syscall", "ioctl", "fcntl", "fcntl64", "flock", "lockf", "open", "open64", "openat", "openat64", "close",
      "fsync", "fdatasync", "msgrcv", "msgsnd", "semop", "semtimedop", "kill", "tgkill", "getchar", "fgets", "fread",
      "fwrite", "fflush", "puts", "printf", "fprintf", "malloc", "calloc", "realloc", "free", "memcpy", "memmove",
      "memset", "strlen", "system", "popen", "pclose", "dlopen", "dlclose", "dlsym", "atexit", "on_exit",
      "quick_exit", "longjmp", "siglongjmp", "futex_wait", "futex_wait_simple", "futex_abstimed_wait",
      "futex_abstimed_wait_cancelable", "lll_mutex_lock_optimized", "do_futex_wait", "do_system"};
  // Prefixes POSIX reserves to the implementation.
  for (std::string_view p : {"pthread_", "sem_", "mq_"})
    if (starts_with(n, p)) return true;
  return names.count(n) > 0;
}

// Frames before the first signal trampoline belong to the handler that reported the crash.
std::size_t after_handler(const std::vector<frame>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i)
    if (is_trampoline(frames[i])) return i + 1;
  return 0;
}

std::string module_and_offset(const frame& f) {
  std::string out(basename(f.module));
  if (f.has_offset) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "+0x%llx", static_cast<unsigned long long>(f.offset));
    out += buf;
  }
  return out;
}

// A meaningful frame's part of a signature: its name, or "module+0xoff".
std::string label(const frame& f) { return unnamed(f) ? module_and_offset(f) : f.function; }

std::string program_signature(const std::vector<frame>& frames, std::size_t depth) {
  std::string out;
  std::size_t taken = 0;
  for (std::size_t i = after_handler(frames); i < frames.size() && taken < depth; ++i) {
    if (!meaningful(frames[i])) continue;
    if (!out.empty()) out += " | ";
    out += label(frames[i]);
    ++taken;
  }
  return out;
}

// For a stack with no program frame at all: its first frame with a module.
std::string runtime_signature(const std::vector<frame>& frames) {
  for (std::size_t i = after_handler(frames); i < frames.size(); ++i) {
    const frame& f = frames[i];
    if (!f.module.empty() && f.module != "??" && !faultline_module(f.module)) return module_and_offset(f);
  }
  return {};
}

// symbolise() over several stacks at once: one addr2line per module (and per few hundred
// addresses), each address looked up once.
void symbolise_stacks(const std::vector<std::vector<frame>*>& stacks) {
  struct slot {
    std::vector<frame>* frames;
    std::size_t index;
  };
  std::map<std::string, std::map<std::uint64_t, std::vector<slot>>> by_module;
  for (auto* frames : stacks) {
    for (std::size_t i = 0; i < frames->size(); ++i) {
      const frame& f = (*frames)[i];
      if (!unnamed(f) || f.outside_functions || !f.has_offset || f.module.size() < 2 || f.module[0] != '/') continue;
      // Frame 0 and the frame a signal interrupted hold the exact address; the others hold
      // return addresses, which may already point past a noreturn call's function.
      const bool exact = i == 0 || is_trampoline((*frames)[i - 1]);
      by_module[f.module][f.offset - (exact || f.offset == 0 ? 0 : 1)].push_back({frames, i});
    }
  }
  constexpr std::size_t batch = 256;  // addresses per addr2line: bounds the command line
  for (const auto& [module, lookups] : by_module) {
    std::error_code ec;
    if (!fs::is_regular_file(module, ec)) continue;
    for (auto it = lookups.begin(); it != lookups.end();) {
      std::vector<std::string> argv = {"addr2line", "-f", "-C", "-e", module};
      std::vector<const std::vector<slot>*> asked;
      std::vector<std::uint64_t> addresses;
      for (; it != lookups.end() && asked.size() < batch; ++it) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(it->first));
        argv.emplace_back(buf);
        asked.push_back(&it->second);
        addresses.push_back(it->first);
      }
      auto r = run_tool(argv, std::chrono::seconds(20));
      if (!r || r->timed_out || !WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) continue;
      // Two lines per address: the function, then "file:line".
      auto ls = lines_of(r->output);
      for (std::size_t k = 0; k < asked.size() && 2 * k < ls.size(); ++k) {
        std::string name = strip_parameters(ls[2 * k]);
        if (name.empty() || name == "??") continue;
        // addr2line names an address after the symbol before it, whatever that symbol's size.
        const bool outside = function_covers(module, addresses[k]) == false;
        for (const slot& s : *asked[k]) {
          frame& f = (*s.frames)[s.index];
          if (outside) {
            f.outside_functions = true;
          } else {
            f.function = name;
          }
        }
      }
    }
  }
}

// The thread that crashed, in a crash-stacks.txt: the one crash.PID names; else the one its
// section header marks (a core section names it, and so can the runner, which knows it as its
// own kernel numbers it: inside a run's PID namespace the agent's ids differ); else, when
// crash.PID was written, the only thread stopped in a signal handler.
const thread_stack* crashing_thread(const std::vector<thread_stack>& threads, const crash_report* crash,
                                    pid_t crash_pid) {
  if (crash)
    for (const auto& t : threads)
      if (t.pid == crash_pid && t.tid == crash->thread && !t.frames.empty()) return &t;
  for (const auto& t : threads)
    if (t.faulted && !t.frames.empty()) return &t;
  if (!crash) return nullptr;
  const thread_stack* in_handler = nullptr;
  for (const auto& t : threads) {
    if (std::none_of(t.frames.begin(), t.frames.end(), is_trampoline)) continue;
    if (in_handler) return nullptr;
    in_handler = &t;
  }
  return in_handler;
}

std::set<std::string> phase_markers(const fs::path& run_dir, pid_t pid) {
  std::set<std::string> out;
  auto phases = read_phases(run_dir);
  auto it = phases.find(pid);
  if (it == phases.end()) return out;
  for (auto l : lines_of(it->second))
    if (!l.empty()) out.emplace(l);
  return out;
}

// The root <testsuites> element's failures and errors attributes.
bool gtest_xml_all_passed(const fs::path& xml) {
  auto text = detail::read_file(xml, 1 << 20);
  if (!text) return false;
  auto root = text->find("<testsuites");
  if (root == std::string::npos) return false;
  auto end = text->find('>', root);
  std::string_view tag = std::string_view(*text).substr(root, end - root);
  auto attr = [&](std::string_view name) -> std::optional<long> {
    auto at = tag.find(std::string(" ") + std::string(name) + "=\"");
    if (at == std::string_view::npos) return std::nullopt;
    at += name.size() + 3;
    long v = 0;
    if (std::from_chars(tag.data() + at, tag.data() + tag.size(), v).ec != std::errc()) return std::nullopt;
    return v;
  };
  auto failures = attr("failures"), errors = attr("errors");
  return failures && errors && *failures == 0 && *errors == 0;
}

}  // namespace

std::string strip_parameters(std::string_view name) {
  std::string s(trim(name));
  // GCC's clones of a function: "f(int) [clone .isra.0] [clone .cold]".
  for (auto clone = s.rfind(" [clone "); clone != std::string::npos && s.back() == ']'; clone = s.rfind(" [clone "))
    s.resize(clone);
  if (ends_with(s, " const")) s.resize(s.size() - 6);
  if (s.empty() || s.back() != ')') return s;
  // Walk back to the '(' that opens the final parameter list.
  int depth = 0;
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] == ')') {
      ++depth;
    } else if (s[i] == '(' && --depth == 0) {
      // "S::operator()": the parentheses are the operator's name, not parameters.
      if (i == 0 || ends_with(std::string_view(s).substr(0, i), "operator")) return s;
      return s.substr(0, i);
    }
  }
  return s;
}

std::optional<crash_report> parse_crash(std::string_view text) {
  auto ls = lines_of(text);
  if (ls.empty() || !starts_with(ls[0], "signal ")) return std::nullopt;
  crash_report r;
  std::string_view n = ls[0].substr(7);
  if (std::from_chars(n.data(), n.data() + n.size(), r.signal).ec != std::errc()) return std::nullopt;
  for (std::size_t i = 1; i < ls.size(); ++i) {
    if (starts_with(ls[i], "thread ")) {
      std::string_view t = ls[i].substr(7);
      std::from_chars(t.data(), t.data() + t.size(), r.thread);
    } else if (auto f = parse_agent_frame(ls[i])) {
      r.frames.push_back(std::move(*f));
    }
  }
  return r;
}

std::vector<thread_stack> parse_stacks(std::string_view stacks_text) {
  std::vector<thread_stack> out;
  pid_t pid = 0;
  pid_t faulted_tid = 0;
  auto format = section_format::unknown;
  bool in_thread = false;
  // A gdb section's `info proc mappings`, and the first thread of the section it names modules for.
  std::vector<mapping> maps;
  std::size_t section_start = 0;
  auto close_section = [&] {
    place_in_modules(out, section_start, maps);
    maps.clear();
    section_start = out.size();
  };
  auto open_thread = [&](pid_t tid) {
    thread_stack t;
    t.pid = pid;
    t.tid = tid;
    t.faulted = tid != 0 && tid == faulted_tid;
    out.push_back(std::move(t));
    in_thread = true;
  };
  for (std::string_view l : lines_of(stacks_text)) {
    if (auto head = parse_section_head(l)) {
      close_section();
      pid = head->pid;
      faulted_tid = head->faulted_tid;
      format = head->format;
      in_thread = false;
      continue;
    }
    // eu-stack's own header, under a "=== ... via eu-stack ===" line or alone.
    if (starts_with(l, "PID ") && ends_with(trim(l), " - process")) {
      close_section();
      pid_t p = leading_int(l.substr(4));
      if (p != pid) faulted_tid = 0;
      pid = p;
      format = section_format::eu_stack;
      in_thread = false;
      continue;
    }
    std::optional<frame> f;
    switch (format) {
      case section_format::gdb:
        if (starts_with(l, "Thread ")) open_thread(gdb_thread_id(l));
        else if (auto m = parse_mapping(l)) maps.push_back(std::move(*m));
        else f = parse_gdb_frame(l);
        break;
      case section_format::eu_stack:
        if (starts_with(l, "TID ")) open_thread(leading_int(l.substr(4)));
        else f = parse_eu_stack_frame(l);
        break;
      case section_format::agent:
      case section_format::proc:  // thread lines without frames
        if (starts_with(l, "thread ")) open_thread(leading_int(l.substr(7)));
        else f = parse_agent_frame(l);
        break;
      case section_format::py_spy:
        if (starts_with(l, "Thread ")) {
          open_thread(leading_int(l.substr(7)));
          out.back().python = true;
        } else {
          f = parse_py_spy_frame(l);
        }
        break;
      case section_format::unknown:
        break;
    }
    if (f && in_thread) out.back().frames.push_back(std::move(*f));
  }
  close_section();
  return out;
}

std::vector<frame> thread_frames(std::string_view stacks_text, pid_t pid, pid_t tid) {
  for (auto& t : parse_stacks(stacks_text))
    if (t.pid == pid && t.tid == tid) return std::move(t.frames);
  return {};
}

bool faultline_module(std::string_view module) {
  const std::string_view mod = basename(module);
  for (std::string_view p : {"libfaultline_", "fiu_posix_preload", "fiu_run_preload", "libfiu.so", "libfiu-"})
    if (starts_with(mod, p)) return true;
  return false;
}

bool meaningful(const frame& f) {
  static const std::set<std::string_view> plumbing = {"_start", "_init", "_fini", "abort", "raise", "gsignal",
                                                      "start_thread", "clone", "clone3", "pthread_kill", "exit",
                                                      "_exit", "_Exit"};
  if (system_module(f.module) || f.outside_functions) return false;
  const std::string& n = f.function;
  if (unnamed(f)) return f.has_offset && !f.module.empty() && f.module != "??";
  if (n[0] == '<' || is_trampoline(f) || plumbing.count(n)) return false;
  // libcudart_static_<hash>: the CUDA runtime's internals, linked into the program itself (the
  // static runtime), so its module is the program's.
  for (std::string_view p : {"__", "_IO_", "_dl_", "_Unwind_", "faultline::agent::", "std::", "__gnu_cxx::",
                             "__cxxabiv1::", "cudart::", "libcudart_static_"})
    if (starts_with(n, p)) return false;
  if ((f.module.empty() || f.module == "??") && libc_function(n)) return false;
  return true;
}

void symbolise(std::vector<frame>& frames) { symbolise_stacks({&frames}); }

std::string frames_signature(const std::vector<frame>& frames, std::size_t depth) {
  std::string out = program_signature(frames, depth);
  return out.empty() ? runtime_signature(frames) : out;
}

std::vector<std::string> top_frame_lines(const std::vector<frame>& frames, std::size_t max, bool below_handler) {
  std::vector<std::string> out;
  for (std::size_t i = below_handler ? after_handler(frames) : 0; i < frames.size() && out.size() < max; ++i) {
    const frame& f = frames[i];
    const bool has_module = !f.module.empty() && f.module != "??";
    // A frame no symbol names (a stripped binary's: a `sh -c` wrapper's dash) says so, with the
    // place an engineer can look up.
    if (unnamed(f)) out.push_back(has_module ? "??  (" + module_and_offset(f) + ", no symbol)" : "??");
    else out.push_back(has_module ? f.function + "  (" + std::string(basename(f.module)) + ")" : f.function);
  }
  return out;
}

namespace {

// The processes whose Python frames were read: they are named by those, not by the
// interpreter's C frames.
std::set<pid_t> python_processes(const std::vector<thread_stack>& threads) {
  std::set<pid_t> out;
  for (const auto& t : threads)
    if (t.python) out.insert(t.pid);
  return out;
}

// Where a blocked thread is, for a hang's signature: its topmost program frame that has a name
// (the call that blocks; a program's own signal handler that deadlocked included: no frame is
// skipped for being a handler's), with `named` true; else, when its program frames are all
// unnamed (a stripped binary: a `sh -c` wrapper's dash), its module, "dash (no symbols)": an
// offset says nothing to a reader, and the same binary blocked elsewhere is the same hang to
// group. nullopt for a thread with no program frame.
std::optional<std::pair<std::string, bool>> blocked_in(const thread_stack& t) {
  std::optional<std::pair<std::string, bool>> unnamed_module;
  for (const frame& f : t.frames) {
    if (!meaningful(f)) continue;
    if (!unnamed(f)) return std::pair{f.function, true};
    if (!unnamed_module) unnamed_module = std::pair{std::string(basename(f.module)) + " (no symbols)", false};
  }
  return unnamed_module;
}

}  // namespace

std::string hang_signature(std::string_view stacks_text, std::size_t depth) {
  auto threads = parse_stacks(stacks_text);
  std::vector<std::vector<frame>*> stacks;
  for (auto& t : threads) stacks.push_back(&t.frames);
  symbolise_stacks(stacks);
  const std::set<pid_t> python = python_processes(threads);
  // Threads named by a function hide those named by a module only: a wrapper never hides the
  // program it runs.
  std::set<std::string> named, modules;
  for (const auto& t : threads) {
    if (!t.python && python.count(t.pid)) continue;
    if (auto where = blocked_in(t)) (where->second ? named : modules).insert(where->first);
  }
  const std::set<std::string>& where = named.empty() ? modules : named;
  std::string out;
  std::size_t taken = 0;
  for (const auto& w : where) {
    if (taken++ == depth) break;
    if (!out.empty()) out += " | ";
    out += w;
  }
  return out;
}

std::optional<std::string> find_invariant(std::string_view log) {
  constexpr std::string_view marker = "invariant violated: ";
  auto at = log.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = log.substr(at + marker.size());
  auto end = rest.find_first_of(":\n");
  std::string name(rest.substr(0, end));
  while (!name.empty() && name.back() == ' ') name.pop_back();
  if (name.empty()) return std::nullopt;
  return name;
}

phase marked_phase(const fs::path& run_dir, pid_t pid) {
  auto m = phase_markers(run_dir, pid);
  const bool over = m.count(agent::marker_work_end) || m.count(agent::marker_main_returned) || m.count(agent::marker_exit);
  return over ? phase::exit : phase::run;
}

std::vector<late_call> late_cuda_calls(const fs::path& run_dir, pid_t leader) {
  std::vector<late_call> calls;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!starts_with(name, agent::late_cuda_file_prefix)) continue;
    const pid_t pid = leading_int(std::string_view(name).substr(std::string_view(agent::late_cuda_file_prefix).size()));
    auto text = detail::read_file(entry.path(), 1 << 22);
    if (!text) continue;
    for (auto l : lines_of(*text)) {
      if (starts_with(l, "call ")) {
        late_call c;
        c.pid = pid;
        auto rest = l.substr(5);
        c.api = std::string(rest.substr(0, rest.find(' ')));
        calls.push_back(std::move(c));
      } else if (auto f = parse_agent_frame(l); f && !calls.empty() && calls.back().pid == pid) {
        calls.back().frames.push_back(std::move(*f));
      }
    }
  }
  // CUDA's own exit teardown makes driver calls too: the runtime releases its primary contexts
  // after the driver has torn itself down (cuDevicePrimaryCtxRelease answered "deinitialized",
  // in every run of every program), from an exit handler or a library destructor of its own.
  // A driver call none of whose frames above the C library (the exit machinery that ran the
  // handler, or the thread's start) is the program's is CUDA's, not the program's: dropped.
  // Runtime calls are always the program's, and a call recorded without frames is kept.
  std::vector<std::vector<frame>*> framed;
  for (auto& c : calls)
    if (!c.frames.empty() && !starts_with(c.api, "cuda")) framed.push_back(&c.frames);
  if (!framed.empty()) {
    symbolise_stacks(framed);
    auto made_by_program = [](const std::vector<frame>& frames) {
      for (const frame& f : frames) {
        const std::string_view mod = basename(f.module);
        if (starts_with(mod, "libc.so") || starts_with(mod, "libc-") || starts_with(mod, "ld-linux")) break;
        if (meaningful(f)) return true;
      }
      return false;
    };
    std::erase_if(calls, [&](const late_call& c) {
      return !c.frames.empty() && !starts_with(c.api, "cuda") && !made_by_program(c.frames);
    });
  }
  std::stable_partition(calls.begin(), calls.end(), [&](const late_call& c) { return c.pid == leader; });
  return calls;
}

std::vector<late_cuda_api> late_cuda_by_api(const fs::path& run_dir) {
  std::map<std::string, std::vector<late_call*>> by_api;
  auto calls = late_cuda_calls(run_dir, 0);
  for (auto& c : calls) by_api[c.api].push_back(&c);
  std::vector<late_cuda_api> out;
  for (auto& [api, group] : by_api) {
    late_cuda_api l;
    l.api = api;
    l.calls = group.size();
    std::set<pid_t> pids;
    for (const late_call* c : group) pids.insert(c->pid);
    l.pids.assign(pids.begin(), pids.end());
    auto framed = std::find_if(group.begin(), group.end(), [](const late_call* c) { return !c->frames.empty(); });
    l.signature = late_cuda_signature(framed != group.end() ? **framed : *group.front());
    out.push_back(std::move(l));
  }
  return out;
}

std::string late_cuda_signature(late_call& call) {
  symbolise(call.frames);
  const std::string where = program_signature(call.frames, 2);
  return "late-cuda: " + call.api + (where.empty() ? "" : " \u2190 " + where);
}

std::vector<std::string> read_points(const fs::path& run_dir) {
  std::set<std::string> reached;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(agent::points_file_prefix, 0) != 0) continue;
    auto text = detail::read_file(it->path(), 1 << 20);
    if (!text) continue;
    std::size_t pos = 0;
    while (pos < text->size()) {
      std::size_t nl = text->find('\n', pos);
      if (nl == std::string::npos) nl = text->size();
      std::string line = text->substr(pos, nl - pos);
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) reached.insert(std::move(line));
      pos = nl + 1;
    }
  }
  return {reached.begin(), reached.end()};
}

namespace {

// The agent's crash report a verdict is about: the leader's if it wrote one, else the earliest.
struct found_crash {
  std::optional<crash_report> report;
  pid_t pid = 0;
};

found_crash find_crash_report(const run_evidence& e) {
  found_crash found;
  fs::file_time_type crash_time{};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(e.run_dir, ec)) {
    std::string name = entry.path().filename().string();
    if (!starts_with(name, agent::crash_file_prefix)) continue;
    pid_t pid = static_cast<pid_t>(std::strtol(name.c_str() + std::string_view(agent::crash_file_prefix).size(), nullptr, 10));
    auto text = detail::read_file(entry.path(), 1 << 20);
    if (!text) continue;
    auto r = parse_crash(*text);
    if (!r) continue;
    auto t = entry.last_write_time(ec);
    bool better = !found.report || (pid == e.leader && found.pid != e.leader) || (found.pid != e.leader && t < crash_time);
    if (better) {
      found.report = std::move(r);
      found.pid = pid;
      crash_time = t;
    }
  }
  return found;
}

// Which phase a process was in when it ended: exit once it marked the exit phase, or, for the
// leader, once gtest's tests finished.
struct work_phases {
  const run_evidence& e;
  bool tests_finished = false;

  phase of(pid_t pid) const {
    return marked_phase(e.run_dir, pid) == phase::exit || (pid == e.leader && tests_finished) ? phase::exit : phase::run;
  }
};

void classify_hang(const run_evidence& e, const work_phases& work, classification& c) {
  c.result = outcome::hang;
  c.when = work.of(e.leader);
  std::string frames_sig;
  if (!e.stacks_path.empty()) {
    if (auto text = detail::read_file(e.stacks_path, 1 << 24)) {
      frames_sig = hang_signature(*text);
      // The stack shown: the first thread blocked in the program's code, else the leader's.
      auto threads = parse_stacks(*text);
      const std::set<pid_t> python = python_processes(threads);
      // A thread named by a function before one named by its module only (a wrapper shell's).
      std::vector<frame>* shown = nullptr;
      for (const bool want_named : {true, false})
        for (auto& t : threads) {
          if (shown || (!t.python && python.count(t.pid))) continue;
          auto where = blocked_in(t);
          const bool in_program = where && (where->second || !want_named);
          if ((!frames_sig.empty() && in_program) || (frames_sig.empty() && t.pid == e.leader && t.tid == e.leader)) shown = &t.frames;
        }
      if (shown) {
        symbolise(*shown);
        // No thread is in the program's code: name the runtime the leader is stuck in.
        if (frames_sig.empty()) frames_sig = frames_signature(*shown);
        c.top_frames = top_frame_lines(*shown, top_frames_kept, false);
      }
    }
  }
  c.signature = frames_sig.empty() ? "hang" : "hang: " + frames_sig;
}

void classify_crash(const run_evidence& e, const work_phases& work, const found_crash& crash, classification& c) {
  c.result = outcome::crash;
  int sig = c.signal.value_or(0);
  pid_t phase_pid = e.leader;
  if (crash.report) {
    if (!c.signal) c.signal = crash.report->signal;
    sig = crash.report->signal;
    phase_pid = crash.pid;
  }
  // The crashing thread's whole stack, captured out of process or from the core.
  std::vector<frame> full;
  if (!e.crash_stacks_path.empty()) {
    if (auto text = detail::read_file(e.crash_stacks_path, 1 << 24)) {
      auto threads = parse_stacks(*text);
      if (const thread_stack* t = crashing_thread(threads, crash.report ? &*crash.report : nullptr, crash.pid)) {
        full = t->frames;
        if (!crash.report) phase_pid = t->pid;
      }
    }
  }
  std::vector<frame> reported = crash.report ? crash.report->frames : std::vector<frame>{};
  symbolise_stacks({&full, &reported});
  // Program frames from either stack first; a runtime's module+offset only when neither has
  // one (crash.PID's frames carry offsets, gdb's do not).
  c.top_frames = top_frame_lines(full.empty() ? reported : full);
  std::string frames_sig = program_signature(full, 3);
  if (frames_sig.empty()) frames_sig = program_signature(reported, 3);
  if (frames_sig.empty()) frames_sig = runtime_signature(reported);
  if (frames_sig.empty()) frames_sig = runtime_signature(full);
  c.when = work.of(phase_pid);
  c.signature = signal_name(sig) + (frames_sig.empty() ? "" : ": " + frames_sig);
}

void classify_failure(const run_evidence& e, bool tests_passed, classification& c) {
  c.result = outcome::fail;
  // The exit status itself is produced when main returns, so only a finished work phase (or
  // a gtest run whose tests all passed) puts a failure at exit.
  bool over = phase_markers(e.run_dir, e.leader).count(agent::marker_work_end) || tests_passed;
  c.when = over ? phase::exit : phase::run;
  auto log = detail::read_file(e.log_path, 1 << 26);
  auto inv = log ? find_invariant(*log) : std::nullopt;
  c.signature = inv ? *inv : "exit " + std::to_string(*c.exit_code);
}

std::string leak_signature(const run_evidence& e) {
  std::set<std::string> what(e.leaked_comms.begin(), e.leaked_comms.end());
  for (const auto& s : e.leaked_shm) what.insert("/dev/shm/" + s);
  std::string list;
  for (const auto& w : what) list += (list.empty() ? "" : ",") + w;
  return "leak: " + list;
}

}  // namespace

classification classify(const run_evidence& e) {
  classification c;
  if (e.spawn_failed) {
    c.result = outcome::error;
    c.signature = "error: " + e.spawn_error;
    return c;
  }
  if (e.wait_status) {
    if (WIFEXITED(*e.wait_status)) c.exit_code = WEXITSTATUS(*e.wait_status);
    else if (WIFSIGNALED(*e.wait_status)) c.signal = WTERMSIG(*e.wait_status);
  }
  const found_crash crash = find_crash_report(e);
  const bool tests_finished = (e.premature_exit_armed && !fs::exists(e.run_dir / premature_exit_file)) ||
                              fs::exists(e.run_dir / gtest_xml_file);
  const bool tests_passed = gtest_xml_all_passed(e.run_dir / gtest_xml_file);
  const work_phases work{e, tests_finished};

  if (e.timed_out) {
    classify_hang(e, work, c);
  } else if (c.signal || crash.report) {
    classify_crash(e, work, crash, c);
  } else if (c.exit_code && *c.exit_code != 0) {
    classify_failure(e, tests_passed, c);
  } else if (auto late = late_cuda_calls(e.run_dir, e.leader); !late.empty()) {
    // A CUDA call after the runtime's teardown: the bug RMM #2367 fixed, silent without this.
    c.result = outcome::fail;
    c.when = phase::exit;
    c.signature = late_cuda_signature(late.front());
  } else if (!e.leaked_pids.empty() || !e.leaked_shm.empty()) {
    c.result = outcome::leak;
    c.when = phase::exit;
    c.signature = leak_signature(e);
  }
  return c;
}

}  // namespace faultline::harness
