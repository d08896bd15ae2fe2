#include "harness/agent_dir.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "faults/preload/phase_table.h"
#include "faults/preload/protocol.h"
#include "harness/cli.h"
#include "harness/detail/sys.h"
#include "harness/results/summary.h"
#include "harness/run/classify.h"
#include "harness/run/phases.h"
#include "harness/run/process.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

constexpr const char* agent_env_about = R"about(Prepare a directory for processes that faultline does not start:
  set -a; eval "$(faultline agent-env --run-dir DIR --faults SPEC)"; set +a
makes DIR (with the phase table a run directory has) and prints the environment under which a
process, and every process it starts, carries the preloaded agent (BUILD/lib/libfaultline_agent.so,
as under `faultline exec`) writing into DIR: LD_PRELOAD (the agent before the current value),
FAULTLINE_RUN_DIR, FAULTLINE_FAULTS, FAULTLINE_SEED, FAULTLINE_AGENT_CRASH=report (with no runner
to read core dumps, a crashing process writes its own crash report: the handler changes how exit
races end), FAULTLINE_AGENT_QUIET=1, and with --late-cuda CUDA_INJECTION64_PATH (also set, with
FAULTLINE_LATE_CUDA=0, for a spec naming cuda/cuda... points, as exec does). A process that is
already running (the shell, a pytest session) is not affected. Read DIR with `faultline agent-report`.
DIR must not hold agent files already: use a new directory for each batch of processes.
Exit status: 0, or 2 for bad input (nothing is created).)about";

constexpr const char* agent_report_about = R"(Report what agent-carrying processes wrote in DIR (see agent-env):
each crash (pid, signal, phase: run, or exit once main returned or exit() began; signature: the top
program frames, as `faultline exec` names a crash), the CUDA calls made after the runtime's teardown
(with --late-cuda; per API: calls, pids, signature) and the fault-spec items processes reached, with
a warning for those none reached. These processes were not started by faultline: there is no exit
status, a process killed by a signal without a handler (SIGKILL, or a crash with
FAULTLINE_AGENT_CRASH=off) leaves no report.
Exit status: 0 nothing found, 1 a crash or a late CUDA call, 2 bad input (no such directory, or
one that holds no agent records: no process carrying the agent wrote there).)";

// Files an agent or agent-env writes in a run directory (protocol.h, phase_table.h).
bool is_agent_file(const std::string& name) {
  for (const char* prefix : {agent::phase_file_prefix, agent::crash_file_prefix, agent::stacks_file_prefix,
                             agent::points_file_prefix, agent::late_cuda_file_prefix})
    if (name.rfind(prefix, 0) == 0) return true;
  return name == agent::phase_table_file || name == agent_env_file;
}

// The pid of "PREFIXPID", or 0.
pid_t pid_after(const std::string& name, std::string_view prefix) {
  if (name.rfind(prefix, 0) != 0) return 0;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  pid_t pid = 0;
  auto [p, ec] = std::from_chars(first, last, pid);
  return ec == std::errc() && p == last && pid > 0 ? pid : 0;
}

core::status write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  f << text;
  f.close();
  if (!f) return {core::errc::io_error, "cannot write " + path.string()};
  return {};
}

std::string pid_list(const std::vector<pid_t>& pids) {
  std::string out;
  for (pid_t p : pids) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

}  // namespace

fs::path agent_library() {
  const fs::path dir = detail::self_dir();
  if (dir.empty()) return {};
  std::error_code ec;
  return fs::weakly_canonical(dir / ".." / "lib" / "libfaultline_agent.so", ec);
}

fs::path fiu_posix_preload() {
  std::error_code ec;
  if (const char* named = std::getenv("FAULTLINE_FIU_POSIX_PRELOAD"); named != nullptr && *named != '\0') {
    return fs::is_regular_file(named, ec) ? fs::path(named) : fs::path();
  }
  for (const char* dir : {"/usr/lib/fiu", "/usr/local/lib/fiu", "/usr/lib/x86_64-linux-gnu/fiu"}) {
    const fs::path p = fs::path(dir) / "fiu_posix_preload.so";
    if (fs::is_regular_file(p, ec)) return p;
  }
  return {};
}

core::result<std::vector<env_var>> preload_environment(const fs::path& agent, const std::vector<std::string>& base,
                                                       bool late_cuda, bool cuda_runtime_points, bool lock_points,
                                                       bool posix_points) {
  std::vector<env_var> out;
  std::string preload = agent.string();
  if (lock_points) {
    const fs::path locks = agent.parent_path() / "libfaultline_lock_points.so";
    std::error_code ec;
    if (!fs::exists(locks, ec))
      return core::status(core::errc::invalid_argument,
                          "--faults names lock/ points, but " + locks.string() + " is missing (it is built beside the agent)");
    preload += ":" + locks.string();
  }
  if (posix_points) {
    const fs::path fiu = fiu_posix_preload();
    if (fiu.empty())
      return core::status(core::errc::invalid_argument,
                          "--faults names posix/ or libc/ points, which need libfiu's fiu_posix_preload.so (Debian: "
                          "fiu-utils), found in none of /usr/lib/fiu, /usr/local/lib/fiu, /usr/lib/x86_64-linux-gnu/fiu; "
                          "FAULTLINE_FIU_POSIX_PRELOAD names it elsewhere");
    preload += ":" + fiu.string();
  }
  if (auto prev = get_env(base, "LD_PRELOAD"); prev && !prev->empty()) preload += ":" + *prev;
  out.emplace_back("LD_PRELOAD", preload);
  // The agent is also the CUDA injection library: it sees late CUDA calls (late-cuda.PID), and
  // cuda/cuda... points act through its CUPTI callbacks; late calls stay unwatched unless asked.
  if (late_cuda || cuda_runtime_points) {
    if (get_env(base, "CUDA_INJECTION64_PATH"))
      return core::status(core::errc::invalid_argument,
                          std::string(late_cuda ? "--late-cuda" : "--faults (cuda/cuda... points)") +
                              ": CUDA_INJECTION64_PATH is set already (another tool's injection library)");
    out.emplace_back("CUDA_INJECTION64_PATH", agent.string());
    if (!late_cuda) out.emplace_back("FAULTLINE_LATE_CUDA", "0");
  }
  return out;
}

core::result<std::vector<env_var>> prepare_agent_dir(const agent_env_request& r) {
  std::error_code ec;
  if (r.agent.empty() || !fs::is_regular_file(r.agent, ec))
    return core::status(core::errc::invalid_argument,
                        "the agent library " + (r.agent.empty() ? std::string("libfaultline_agent.so") : r.agent.string()) +
                            " is missing (it is built beside faultline, in BUILD/lib)");
  auto preload = preload_environment(r.agent, r.base, r.late_cuda, r.cuda_runtime_points, r.lock_points, r.posix_points);
  if (!preload) return preload.error();
  if (r.run_dir.empty()) return core::status(core::errc::invalid_argument, "--run-dir: empty path");
  const fs::path dir = fs::absolute(r.run_dir, ec);
  if (ec) return core::status(core::errc::invalid_argument, "--run-dir " + r.run_dir.string() + ": " + ec.message());
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) return core::status(core::errc::invalid_argument, "--run-dir " + dir.string() + ": not a directory");
    // An earlier batch's crash reports would be reported as this one's, and its phase table
    // would be zeroed under processes that may still run.
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (is_agent_file(name))
        return core::status(core::errc::invalid_argument, "--run-dir " + dir.string() + " already holds agent files (" + name +
                                                              "): give each batch of processes a new directory");
    }
  }
  fs::create_directories(dir, ec);
  if (ec) return core::status(core::errc::io_error, "cannot create " + dir.string() + ": " + ec.message());
  if (auto s = reset_phase_table(dir); !s) return s;
  const nlohmann::json record = {{"faults", r.faults}, {"seed", r.seed}, {"late_cuda", r.late_cuda}};
  if (auto s = write_text(dir / agent_env_file, record.dump() + "\n"); !s) return s;

  std::vector<env_var> out = {preload->front()};
  out.emplace_back(agent::run_dir_env, dir.string());
  out.emplace_back("FAULTLINE_FAULTS", r.faults);
  out.emplace_back("FAULTLINE_SEED", std::to_string(r.seed));
  out.emplace_back(agent::crash_mode_env, "report");
  out.emplace_back(agent::quiet_env, "1");
  out.insert(out.end(), preload->begin() + 1, preload->end());
  return out;
}

core::result<agent_findings> read_agent_dir(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return core::status(core::errc::not_found, run_dir.string() + ": no such directory");
  agent_findings f;

  struct dated_crash {
    fs::file_time_type written;
    agent_crash crash;
  };
  std::vector<dated_crash> crashes;
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const pid_t pid = pid_after(it->path().filename().string(), agent::crash_file_prefix);
    if (pid == 0) continue;
    auto text = detail::read_file(it->path(), 1 << 20);
    if (!text) continue;
    auto report = parse_crash(*text);
    if (!report) continue;
    symbolise(report->frames);
    const std::string frames = frames_signature(report->frames);
    agent_crash c;
    c.pid = pid;
    c.thread = report->thread;
    c.signal = report->signal;
    c.when = marked_phase(run_dir, pid);
    c.signature = signal_name(report->signal) + (frames.empty() ? "" : ": " + frames);
    std::error_code tec;
    crashes.push_back({it->last_write_time(tec), std::move(c)});
  }
  std::sort(crashes.begin(), crashes.end(), [](const dated_crash& a, const dated_crash& b) {
    return a.written != b.written ? a.written < b.written : a.crash.pid < b.crash.pid;
  });
  for (auto& c : crashes) f.crashes.push_back(std::move(c.crash));

  f.late_cuda = late_cuda_by_api(run_dir);

  f.points_reached = read_points(run_dir);
  if (auto text = detail::read_file(run_dir / agent_env_file, 1 << 20)) {
    auto record = nlohmann::json::parse(*text, nullptr, false);
    if (record.is_object() && record.contains("faults") && record["faults"].is_string()) {
      const std::set<std::string> reached(f.points_reached.begin(), f.points_reached.end());
      f.points_never_reached = points_not_reached(record["faults"].get<std::string>(), reached);
    }
  }
  f.processes = read_phases(run_dir).size();
  return f;
}

nlohmann::json to_json(const agent_findings& f) {
  using nlohmann::json;
  json crashes = json::array();
  for (const auto& c : f.crashes)
    crashes.push_back({{"pid", c.pid},
                       {"thread", c.thread},
                       {"signal", {{"name", signal_name(c.signal)}, {"number", c.signal}}},
                       {"phase", to_string(c.when)},
                       {"signature", c.signature}});
  json late = json::array();
  for (const auto& l : f.late_cuda)
    late.push_back({{"api", l.api}, {"calls", l.calls}, {"pids", l.pids}, {"phase", to_string(phase::exit)}, {"signature", l.signature}});
  return json{{"crashes", crashes},
              {"late_cuda", late},
              {"points_reached", f.points_reached},
              {"points_never_reached", f.points_never_reached ? json(*f.points_never_reached) : json(nullptr)},
              {"processes", f.processes}};
}

CLI::App* add_agent_env_command(CLI::App& app, agent_env_options& o) {
  auto* sub = app.add_subcommand("agent-env", "print the environment that puts the agent into processes faultline does not start: "
                                              "faultline agent-env --run-dir DIR [--faults SPEC] [--seed S] [--late-cuda] [--json]");
  sub->footer(agent_env_about);
  sub->add_option("--run-dir", o.run_dir, "the directory the agent-carrying processes write into (created)")->required();
  sub->add_option("--faults", o.faults, "fault spec (FAULTLINE_FAULTS), checked as exec checks it");
  sub->add_option("--seed", o.seed, "FAULTLINE_SEED (default: from the clock)");
  sub->add_flag("--late-cuda", o.late_cuda,
                "also make the agent the CUDA injection library (CUDA_INJECTION64_PATH): CUDA calls after the runtime's "
                "teardown are recorded (see exec --late-cuda)");
  sub->add_flag("--json", o.json, "print one JSON object, name -> value");
  return sub;
}

CLI::App* add_agent_report_command(CLI::App& app, agent_report_options& o) {
  auto* sub = app.add_subcommand("agent-report", "report crashes, late CUDA calls and fault points reached in an agent-env "
                                                 "directory: faultline agent-report DIR [--json]");
  sub->footer(agent_report_about);
  sub->add_option("dir", o.run_dir, "the directory given to agent-env --run-dir")->required();
  sub->add_flag("--json", o.json, R"(print one JSON object: {"crashes":[...], "late_cuda":[...], "points_reached":[...], ...})");
  return sub;
}

int agent_env_command(const agent_env_options& o, const spec_check& check, std::ostream& out, std::ostream& err) {
  auto facts = check(o.faults);
  if (!facts) {
    err << "faultline: error: " << facts.error().message() << "\n";
    return exit_usage;
  }
  agent_env_request r;
  r.run_dir = o.run_dir;
  r.faults = o.faults;
  r.cuda_runtime_points = facts->cuda_runtime_points;
  r.lock_points = facts->lock_points;
  r.posix_points = facts->posix_points;
  r.late_cuda = o.late_cuda;
  if (!o.seed.empty()) {
    auto [p, ec] = std::from_chars(o.seed.data(), o.seed.data() + o.seed.size(), r.seed);
    if (ec != std::errc() || p != o.seed.data() + o.seed.size()) {
      err << "faultline: error: --seed '" << o.seed << "': expected a non-negative integer\n";
      return exit_usage;
    }
  } else {
    r.seed = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  }
  r.agent = agent_library();
  r.base = current_environment();
  auto vars = prepare_agent_dir(r);
  if (!vars) {
    err << "faultline: error: " << vars.error().message() << "\n";
    return exit_usage;
  }
  if (o.json) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : *vars) j[k] = v;
    out << j.dump() << "\n";
  } else {
    for (const auto& [k, v] : *vars) out << k << "=" << detail::shell_quote(v) << "\n";
  }
  out.flush();
  return exit_ok;
}

int agent_report_command(const agent_report_options& o, std::ostream& out, std::ostream& err) {
  auto f = read_agent_dir(o.run_dir);
  if (!f) {
    err << "faultline: error: " << f.error().message() << "\n";
    return exit_usage;
  }
  // "0 crashes" of a directory no process wrote into would read as a clean bill of health.
  if (f->processes == 0 && f->crashes.empty() && f->late_cuda.empty() && f->points_reached.empty()) {
    std::error_code ec;
    if (fs::exists(fs::path(o.run_dir) / agent_env_file, ec))
      err << "faultline: error: " << o.run_dir
          << ": no process carried the agent into it (agent-env prepared it, but no process started with its "
             "variables has written there): nothing to report\n";
    else
      err << "faultline: error: " << o.run_dir
          << " holds no agent records (empty, or not a directory made by agent-env --run-dir): nothing to report\n";
    return exit_usage;
  }
  if (o.json) {
    out << to_json(*f).dump() << "\n";
  } else {
    for (const auto& c : f->crashes)
      out << "crash: pid " << c.pid << ", " << signal_name(c.signal) << ", phase " << to_string(c.when) << ": " << c.signature << "\n";
    for (const auto& l : f->late_cuda)
      out << "late CUDA call: " << l.api << " x" << l.calls << " (pid" << (l.pids.size() == 1 ? " " : "s ") << pid_list(l.pids)
          << "), phase exit: " << l.signature << "\n";
    for (const auto& p : f->points_reached) out << "fault point reached: " << p << "\n";
    if (f->points_never_reached && !f->points_never_reached->empty()) {
      out << "warning: fault points no process reached: ";
      for (std::size_t i = 0; i < f->points_never_reached->size(); ++i) out << (i ? ", " : "") << (*f->points_never_reached)[i];
      out << " (a misspelt point, or no process got there)\n";
    }
    out << o.run_dir << ": " << f->processes << (f->processes == 1 ? " process" : " processes") << " carried the agent; "
        << f->crashes.size() << (f->crashes.size() == 1 ? " crash, " : " crashes, ") << f->late_cuda.size()
        << (f->late_cuda.size() == 1 ? " API" : " APIs") << " called late\n";
  }
  out.flush();
  return f->found() ? exit_failed : exit_ok;
}

}  // namespace faultline::harness
