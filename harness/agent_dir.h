// Agent directories: the agent's verdicts for processes that faultline does not start.
//
// `faultline run` and `exec` start every process of a run themselves, give it the agent's
// environment (faults/preload/protocol.h) and classify the run from its exit status and its run
// directory. A test suite that starts its own processes (a pytest session's subprocess and
// multiprocessing children, a script's CUDA programs) gets the same agent through two commands:
//
//   set -a; eval "$(faultline agent-env --run-dir d --faults 'exit/end=delay(50ms)')"; set +a
//   ./my_program                    # it and everything it starts carry the agent, writing into d
//   faultline agent-report d        # crashes, late CUDA calls, fault points reached
//
// agent-env makes DIR with the phase table the runner makes for each run (phases.h), records what
// it set in DIR/agent-env.json and prints the variables: LD_PRELOAD (the agent before any value
// in faultline's own environment), FAULTLINE_RUN_DIR (absolute), FAULTLINE_FAULTS, FAULTLINE_SEED,
// FAULTLINE_AGENT_CRASH=report (no runner takes core dumps here, so the crashing process writes
// crash.PID itself: its handler perturbs exit races, see protocol.h), FAULTLINE_AGENT_QUIET=1, and
// with --late-cuda (or a spec naming cuda/cuda... points) CUDA_INJECTION64_PATH, as `exec` sets
// them (preload_environment). The spec is checked as `exec --faults` checks it.
//
// agent-report reads DIR as classify() reads a run directory, with no exit status to go by: every
// crash.PID (signal, phase from the process's markers, signature by classify.h's rules), the late
// CUDA calls grouped per API (signed as classify() signs a run they fail), and the spec items that
// processes reached (points.PID) or, when DIR/agent-env.json names the spec, never reached.
//
// Exit status: agent-env 0, or 2 for bad input (nothing created); agent-report 0 when no crash and
// no late CUDA call was found, 1 when one was, 2 for bad input (no such directory, or one holding
// no agent records: no process marked, crashed, called late or reached a point there).
//
// Thread safety: plain functions over files; reading a directory runs addr2line.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "harness/results/results.h"
#include "harness/run/classify.h"

namespace CLI {
class App;
}

namespace faultline::harness {

/// What agent-env records in the directory: {"faults": SPEC, "seed": S, "late_cuda": BOOL}.
inline constexpr const char* agent_env_file = "agent-env.json";

/// One environment variable, name and value.
using env_var = std::pair<std::string, std::string>;

/// BUILD/lib/libfaultline_agent.so beside the running faultline (where `exec` preloads it from),
/// made canonical; empty when /proc/self/exe cannot be read.
std::filesystem::path agent_library();

/// The variables that preload `agent` into a process started with environment `base`, as `exec`
/// sets them: LD_PRELOAD=AGENT, or AGENT:PREVIOUS when `base` has a non-empty LD_PRELOAD; with
/// `late_cuda` (the agent sees CUDA calls made after the runtime's teardown) or
/// `cuda_runtime_points` (the spec names cuda/cuda... points, which act through CUPTI) also
/// CUDA_INJECTION64_PATH=AGENT, and FAULTLINE_LATE_CUDA=0 when only the points need it; with
/// `lock_points` (the spec names lock/ points) libfaultline_lock_points.so, beside the agent,
/// preloaded after it (faults/preload/lock_points.h; not preloaded otherwise: it wraps every
/// mutex call); with `posix_points` (posix/ or libc/ points) libfiu's fiu_posix_preload.so last.
/// Errors: invalid_argument when CUDA_INJECTION64_PATH is needed and `base` sets it already
/// (another tool's injection library).
core::result<std::vector<env_var>> preload_environment(const std::filesystem::path& agent,
                                                       const std::vector<std::string>& base, bool late_cuda,
                                                       bool cuda_runtime_points = false, bool lock_points = false,
                                                       bool posix_points = false);

/// libfiu's fiu_posix_preload.so for posix/ and libc/ points (faults/preload/posix_points.h):
/// $FAULTLINE_FIU_POSIX_PRELOAD, else where libfiu's utilities install it (/usr/lib/fiu,
/// /usr/local/lib/fiu, /usr/lib/x86_64-linux-gnu/fiu); empty when none is there.
std::filesystem::path fiu_posix_preload();

/// What an agent directory is prepared for.
struct agent_env_request {
  std::filesystem::path run_dir;
  std::string faults;               ///< FAULTLINE_FAULTS; checked by the caller
  bool cuda_runtime_points = false; ///< `faults` names cuda/cuda... points (spec_facts)
  bool lock_points = false;         ///< `faults` names lock/ points (spec_facts)
  bool posix_points = false;        ///< `faults` names posix/ or libc/ points (spec_facts)
  std::uint64_t seed = 0;           ///< FAULTLINE_SEED
  bool late_cuda = false;
  std::filesystem::path agent;      ///< the preload library (agent_library())
  std::vector<std::string> base;    ///< the environment the variables are meant for ("K=V")
};

/// Makes `r.run_dir` (and its parents) with a fresh phase table and agent_env_file, and returns
/// the variables in the order agent-env prints them. Errors, all before anything is created:
/// invalid_argument for a missing agent, a directory that already holds agent files (an earlier
/// run's findings would be reported again) or what preload_environment refuses; io_error when
/// the directory or its files cannot be made.
core::result<std::vector<env_var>> prepare_agent_dir(const agent_env_request& r);

/// One crash.PID.
struct agent_crash {
  pid_t pid = 0;
  pid_t thread = 0;
  int signal = 0;
  phase when = phase::run;
  std::string signature;  ///< "SIGSEGV: f | g | main", as classify() names a crash
};

/// The late calls of one CUDA API (every late-cuda.PID together): classify.h's.
using agent_late_cuda = late_cuda_api;

/// Everything an agent directory says.
struct agent_findings {
  std::vector<agent_crash> crashes;       ///< in the order the files were written
  std::vector<agent_late_cuda> late_cuda; ///< by API name
  std::vector<std::string> points_reached;
  /// The items of agent_env_file's spec in no points.PID; nullopt without that file.
  std::optional<std::vector<std::string>> points_never_reached;
  std::uint64_t processes = 0;            ///< processes that left phase markers (carried the agent)

  /// A crash or a late CUDA call.
  bool found() const { return !crashes.empty() || !late_cuda.empty(); }
};

/// Reads an agent directory. Errors: not_found when `run_dir` is not a directory.
core::result<agent_findings> read_agent_dir(const std::filesystem::path& run_dir);

/// {"crashes": [{"pid", "thread", "signal": {"name", "number"}, "phase", "signature"}],
///  "late_cuda": [{"api", "calls", "pids", "phase": "exit", "signature"}], "points_reached": [...],
///  "points_never_reached": [...] or null, "processes": N}.
nlohmann::json to_json(const agent_findings& f);

/// `faultline agent-env`'s options.
struct agent_env_options {
  std::string run_dir, faults, seed;
  bool late_cuda = false;
  bool json = false;
};

/// `faultline agent-report`'s options.
struct agent_report_options {
  std::string run_dir;
  bool json = false;
};

/// What checking a fault spec tells of it.
struct spec_facts {
  bool cuda_runtime_points = false;  ///< it names cuda/cuda... points: the agent must be the CUDA injection library
  bool lock_points = false;          ///< it names lock/ points: libfaultline_lock_points.so is preloaded too
  bool posix_points = false;         ///< it names posix/ or libc/ points: libfiu's POSIX preload is too
};

/// Checks a fault spec as `exec --faults` does (cli.cc); an error's message is printed after
/// "faultline: error: ".
using spec_check = std::function<core::result<spec_facts>(const std::string& spec)>;

/// Adds `agent-env` to `app`, parsing into `o` (which must outlive the parse).
CLI::App* add_agent_env_command(CLI::App& app, agent_env_options& o);
/// Adds `agent-report` to `app`, parsing into `o` (which must outlive the parse).
CLI::App* add_agent_report_command(CLI::App& app, agent_report_options& o);

/// Runs agent-env: the variables to `out` (NAME=VALUE lines, values shell-quoted where needed, or
/// one JSON object), errors to `err`.
int agent_env_command(const agent_env_options& o, const spec_check& check, std::ostream& out, std::ostream& err);
/// Runs agent-report: one line per finding (or one JSON object) to `out`, errors to `err`.
int agent_report_command(const agent_report_options& o, std::ostream& out, std::ostream& err);

}  // namespace faultline::harness
