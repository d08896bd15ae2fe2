#include "harness/classify.h"

#include <cxxabi.h>
#include <sys/wait.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "harness/agent/protocol.h"
#include "harness/detail/sys.h"
#include "harness/process.h"

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

std::string_view basename(std::string_view path) {
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool is_trampoline(const frame& f) {
  return f.function == "__restore_rt" || f.function == "<signal handler called>" || f.function == "__kernel_rt_sigreturn";
}

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

// "#3  0x000055.. in ns::sleeper (n=...) at t.cc:3" or "#0  main () at x.cc:4" or
// "#1  0x7f.. in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6".
std::optional<frame> parse_gdb_frame(std::string_view line) {
  if (!starts_with(line, "#")) return std::nullopt;
  std::size_t p = 1;
  while (p < line.size() && std::isdigit(static_cast<unsigned char>(line[p]))) ++p;
  while (p < line.size() && line[p] == ' ') ++p;
  std::string_view rest = line.substr(p);
  if (starts_with(rest, "0x")) {
    auto in = rest.find(" in ");
    if (in == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(in + 4);
  }
  frame f;
  auto args = rest.find(" (");
  f.function = std::string(rest.substr(0, args));
  if (auto from = rest.rfind(" from "); from != std::string_view::npos) f.module = std::string(rest.substr(from + 6));
  return f;
}

std::set<std::string> phase_markers(const fs::path& run_dir, pid_t pid) {
  std::set<std::string> out;
  auto text = detail::read_file(run_dir / (agent::phase_file_prefix + std::to_string(pid)), 1 << 16);
  if (!text) return out;
  // The agent maps the file at a fixed size: its unused tail is NUL bytes.
  text->resize(std::min(text->size(), text->find('\0')));
  for (auto l : lines_of(*text))
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
  std::string s(name);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() > 6 && s.compare(s.size() - 6, 6, " const") == 0) s.resize(s.size() - 6);
  if (s.empty() || s.back() != ')') return s;
  // Walk back to the '(' that opens the final parameter list.
  int depth = 0;
  for (std::size_t i = s.size(); i-- > 0;) {
    if (s[i] == ')') ++depth;
    else if (s[i] == '(' && --depth == 0) {
      if (i == 0) return s;
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

std::vector<frame> thread_frames(std::string_view stacks_text, pid_t pid, pid_t tid) {
  const std::string head = "=== process " + std::to_string(pid) + " (";
  auto ls = lines_of(stacks_text);
  std::size_t i = 0;
  while (i < ls.size() && !starts_with(ls[i], head)) ++i;
  if (i == ls.size()) return {};
  const bool gdb = ls[i].find(" via gdb ===") != std::string_view::npos;
  const std::string lwp = "(LWP " + std::to_string(tid) + ")";
  const std::string agent_thread = "thread " + std::to_string(tid);
  std::vector<frame> out;
  bool in_thread = false;
  for (++i; i < ls.size() && !starts_with(ls[i], "=== process "); ++i) {
    std::string_view l = ls[i];
    if (gdb ? starts_with(l, "Thread ") : starts_with(l, "thread ")) {
      if (in_thread) break;
      in_thread = gdb ? l.find(lwp) != std::string_view::npos
                      : (starts_with(l, agent_thread) && (l.size() == agent_thread.size() || l[agent_thread.size()] == ' '));
      continue;
    }
    if (!in_thread) continue;
    if (l.empty()) break;
    if (auto f = gdb ? parse_gdb_frame(l) : parse_agent_frame(l)) out.push_back(std::move(*f));
  }
  return out;
}

bool meaningful(const frame& f) {
  static const char* const system_modules[] = {"libc.so", "libc-", "libpthread", "ld-linux", "ld-2.", "libstdc++",
                                               "libgcc_s", "libm.so", "libdl", "librt", "libfaultline_agent",
                                               "linux-vdso"};
  static const std::set<std::string_view> plumbing = {"_start", "abort", "raise", "gsignal", "start_thread",
                                                      "clone", "clone3", "pthread_kill", "exit", "_exit"};
  std::string_view mod = basename(f.module);
  for (const char* m : system_modules)
    if (starts_with(mod, m)) return false;
  const std::string& n = f.function;
  if (n.empty() || n == "??") return f.has_offset && !f.module.empty() && f.module != "??";
  if (n[0] == '<' || is_trampoline(f) || plumbing.count(n)) return false;
  for (std::string_view p : {"__", "faultline::agent::", "std::", "__gnu_cxx::", "__cxxabiv1::", "_Unwind_"})
    if (starts_with(n, p)) return false;
  return true;
}

void symbolise(std::vector<frame>& frames) {
  // Group the unnamed frames by module: one addr2line per module.
  std::map<std::string, std::vector<std::size_t>> by_module;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const frame& f = frames[i];
    if ((f.function.empty() || f.function == "??") && f.has_offset && f.module.size() > 1 && f.module[0] == '/' &&
        fs::exists(f.module))
      by_module[f.module].push_back(i);
  }
  for (const auto& [module, idx] : by_module) {
    std::vector<std::string> argv = {"addr2line", "-f", "-C", "-e", module};
    for (std::size_t i : idx) {
      // Frame 0 and the frame a signal interrupted hold the exact address; the others hold
      // return addresses, which may already point past a noreturn call's function.
      bool exact = i == 0 || is_trampoline(frames[i - 1]);
      std::uint64_t off = frames[i].offset - (exact || frames[i].offset == 0 ? 0 : 1);
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(off));
      argv.emplace_back(buf);
    }
    auto r = run_tool(argv, std::chrono::seconds(20));
    if (!r || r->timed_out || !WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) continue;
    auto ls = lines_of(r->output);
    for (std::size_t k = 0; k < idx.size() && 2 * k < ls.size(); ++k) {
      std::string name = strip_parameters(ls[2 * k]);
      if (!name.empty() && name != "??") frames[idx[k]].function = name;
    }
  }
}

std::string frames_signature(const std::vector<frame>& frames, std::size_t depth) {
  // Frames up to a signal trampoline belong to the handler that reported the crash.
  std::size_t start = 0;
  for (std::size_t i = 0; i < frames.size(); ++i)
    if (is_trampoline(frames[i])) {
      start = i + 1;
      break;
    }
  std::string out;
  std::size_t taken = 0;
  for (std::size_t i = start; i < frames.size() && taken < depth; ++i) {
    const frame& f = frames[i];
    if (!meaningful(f)) continue;
    std::string name = f.function;
    if (name.empty() || name == "??") {
      char buf[32];
      std::snprintf(buf, sizeof buf, "+0x%llx", static_cast<unsigned long long>(f.offset));
      name = std::string(basename(f.module)) + buf;
    }
    if (!out.empty()) out += " | ";
    out += name;
    ++taken;
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

  // Crash reports: the leader's if it wrote one, else the earliest.
  std::optional<crash_report> crash;
  pid_t crash_pid = 0;
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
    bool better = !crash || (pid == e.leader && crash_pid != e.leader) || (crash_pid != e.leader && t < crash_time);
    if (better) {
      crash = std::move(r);
      crash_pid = pid;
      crash_time = t;
    }
  }

  const bool tests_finished = (e.premature_exit_armed && !fs::exists(e.run_dir / premature_exit_file)) ||
                              fs::exists(e.run_dir / gtest_xml_file);
  const bool tests_passed = gtest_xml_all_passed(e.run_dir / gtest_xml_file);
  auto work_over = [&](pid_t pid) {
    auto m = phase_markers(e.run_dir, pid);
    return m.count(agent::marker_work_end) || m.count(agent::marker_main_returned) || m.count(agent::marker_exit) ||
           (pid == e.leader && tests_finished);
  };

  if (e.timed_out) {
    c.result = outcome::hang;
    c.when = work_over(e.leader) ? phase::exit : phase::run;
    std::string frames_sig;
    if (!e.stacks_path.empty()) {
      if (auto text = detail::read_file(e.stacks_path, 1 << 24)) {
        auto frames = thread_frames(*text, e.leader, e.leader);
        symbolise(frames);
        frames_sig = frames_signature(frames);
      }
    }
    c.signature = frames_sig.empty() ? "hang" : "hang: " + frames_sig;
  } else if (c.signal || crash) {
    c.result = outcome::crash;
    int sig = c.signal.value_or(0);
    std::string frames_sig;
    if (crash) {
      if (!c.signal) c.signal = crash->signal;
      sig = crash->signal;
      symbolise(crash->frames);
      frames_sig = frames_signature(crash->frames);
      c.when = work_over(crash_pid) ? phase::exit : phase::run;
    } else {
      c.when = work_over(e.leader) ? phase::exit : phase::run;
    }
    c.signature = signal_name(sig) + (frames_sig.empty() ? "" : ": " + frames_sig);
  } else if (c.exit_code && *c.exit_code != 0) {
    c.result = outcome::fail;
    // The exit status itself is produced when main returns, so only a finished work phase (or
    // a gtest run whose tests all passed) puts a failure at exit.
    bool over = phase_markers(e.run_dir, e.leader).count(agent::marker_work_end) || tests_passed;
    c.when = over ? phase::exit : phase::run;
    auto log = detail::read_file(e.log_path, 1 << 26);
    auto inv = log ? find_invariant(*log) : std::nullopt;
    c.signature = inv ? *inv : "exit " + std::to_string(*c.exit_code);
  } else if (!e.leaked_pids.empty() || !e.leaked_shm.empty()) {
    c.result = outcome::leak;
    c.when = phase::exit;
    std::set<std::string> what(e.leaked_comms.begin(), e.leaked_comms.end());
    for (const auto& s : e.leaked_shm) what.insert("/dev/shm/" + s);
    std::string list;
    for (const auto& w : what) list += (list.empty() ? "" : ",") + w;
    c.signature = "leak: " + list;
  }
  return c;
}

}  // namespace faultline::harness
