#include "harness/cli.h"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>

#include "faults/spec.h"
#include "harness/agent_dir.h"
#include "harness/campaign/campaign.h"
#include "harness/campaign/duration.h"
#include "harness/campaign/scenario_catalog.h"
#include "harness/campaign/scenario_variant.h"
#include "harness/campaign/soak.h"
#include "harness/cli_faults.h"
#include "harness/cores_cli.h"
#include "harness/detail/sys.h"
#include "harness/region_cli.h"
#include "harness/version.h"
#include "harness/results/summary.h"
#include "harness/run/containment.h"
#include "harness/run/core_dump.h"
#include "harness/run/process.h"
#include "reports/commands.h"

namespace faultline::harness {
namespace {

// CLI11's PositiveNumber prints its range up to DBL_MAX; counts read better with a plain message.
const CLI::Validator positive_count(
    [](std::string& text) -> std::string {
      std::size_t used = 0;
      unsigned long long v = 0;
      try {
        v = std::stoull(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != text.size() || text.empty() || text[0] == '-' || v == 0) {
        return "expected a whole number of at least 1, got '" + text + "'";
      }
      return {};
    },
    "COUNT>=1");


namespace fs = std::filesystem;

constexpr const char* about = R"(faultline - run a program or a reproducer scenario many times, in isolation, and say how it fails.

Every run is a fresh process in its own process group under an outer timeout; the harness is a
subreaper, so nothing the run forks escapes. A run that hangs has the stacks of every process of
its tree captured (gdb, else eu-stack, else the harness's own libdwfl reader) before the tree is terminated
(SIGTERM, grace period, SIGKILL) and reaped. Each run is classified as pass, fail, crash, hang,
leak or error, with a phase (run: during the work; exit: at process exit) and a signature that
groups failures with the same cause. Every run appends one JSON line to OUT/results.jsonl as it
ends. An --out that already holds a campaign (or soak) is never replaced unasked: --resume
continues it, --replace starts a new one there, and without either the command is refused (exit
status 2) naming what is there. A run that did not pass keeps its output in OUT/logs/RUN.log and its
files (crash reports, stacks) in OUT/runs/RUN/; a passing run keeps them only while it is among the
first 3 passes of its scenario or command (--keep), so a soak of a million passing runs stays small.
OUT/campaign.json records the options that number the runs, for --resume.

With --faults, the summary names every point pattern of the spec that no run reached (a misspelt
point, or one the program never gets to); each run's line lists those it reached.

Run k of a scenario or command gets seed S+k (FAULTLINE_SEED); the summary prints a command line
that replays the first failure. Runs are numbered globally and sharded (run k belongs to shard k mod n)
with --shard i/n, else a scheduler's variables: GTEST_SHARD_INDEX of GTEST_TOTAL_SHARDS; a Kubernetes
Indexed Job's JOB_COMPLETION_INDEX of FAULTLINE_SHARD_COUNT (set it to the Job's completions); a Slurm
array's (SLURM_ARRAY_TASK_ID - _MIN) / _STEP of SLURM_ARRAY_TASK_COUNT.

`faultline soak` runs the scenarios for a time budget, each run with a fault spec drawn from its
scenario's fault space, or a command (`-- CMD`, as exec runs it) with a seed per run, and can be
killed and resumed at any moment (see its --help).
`faultline report` writes JUnit XML, Markdown and HTML reports of results (shards merged);
`faultline gate` fails on a statistically significant regression against a baseline.

Exit status: 0 when every run met its expectation, 1 when one did not, 2 for a usage or
configuration error, 130 when interrupted (report and gate: see their --help).)";

constexpr const char* run_about = R"(Run scenarios from the scenario binary (faultline-scenarios beside faultline, or
$FAULTLINE_SCENARIOS). SCENARIO may be a shell pattern ("exit/*"). Each scenario's own timeout is
the default per-run timeout.)";

constexpr const char* exec_about = R"(Run a command repeatedly:  faultline exec [OPTIONS] -- CMD [ARGS...]
The command must exist and be executable (searched in PATH without a '/'), else nothing runs
(exit status 2). The in-process agent (BUILD/lib/libfaultline_agent.so, beside the faultline
binary) is preloaded so that exit-time failures are told from work-time ones and the agent's fault
points work; it installs no crash handler by default (crash stacks come from core dumps, see
--crash-capture); gtest programs are asked for an XML report. Default per-run timeout: 10m.
The agent's own fault points, for any program: exit/start and exit/end (off, delay, abort, kill,
print, stop) and cuda/<API> before a CUDA driver call (cuda/cuMemFree_v2, cuda/cuMem*: also
fail(CUDA_ERROR_...) -- the call is not made -- and teardown(device)) or runtime call
(cuda/cudaEventSynchronize: through CUPTI, no fail); process/start before main in every new
process, spawn/parent before fork/vfork/clone/exec/posix_spawn (also fail(ERRNO)), both with an
optional @program filter (process/start@python3*); lock/sem|mutex|file/wait|acquired|release on
process-shared locks, with an optional @function filter (lock/sem/acquired@lock_shrreg=kill). See
the README's "CUDA fault points", "Process points" and "Lock points"; posix/... and libc/... are
libfiu's POSIX preload's points (fail(ERRNO), delay, kill, abort, print), preloaded when named;
fn/SYMBOL stands at the entry of a function of the program or its libraries (fn/SYMBOL+OFFSET at
a byte offset inside it, which must start an instruction) (off, delay, abort,
kill, print, stop), found in the symbol tables: fn/lock_shrreg=kill. stop: the process stops
(SIGSTOP) until continued or killed.)";

constexpr const char* verify_about = R"(Check that every scenario's clean variant never fails and that each of its bug points is
detected (any outcome but pass) at least at the scenario's required rate. Prints a table; exit
status 0 only when every row is OK.)";

constexpr const char* soak_about = R"(Soak scenarios or a command for a time budget:
  faultline soak [SCENARIO...] --budget 8h [--out DIR] [--resume]
  faultline soak --budget 8h [OPTIONS] -- CMD [ARGS...]
The scenarios (default: all) run in rotation: run k is scenario (k / n) mod N of the N scenarios
(n: the shard count, 1 unsharded), with seed S+k and a fault spec drawn from its scenario's fault
space (`faultline list --json` shows them), so every failure replays with the
`faultline run` line printed for it. A command (after --, never with scenario names) runs as
`faultline exec` runs it, checked as exec checks it (a program that cannot be started is refused
before anything in --out changes): run k gets seed S+k (FAULTLINE_SEED, so the agent's
probabilities draw anew every run) and the --faults spec, the same on every run; every failure
replays with the `faultline exec` line printed for it. --timeout (default 10m), --faults,
--no-preload, --slots and --late-cuda are a command's, as for exec.
Between runs the soak checks for processes, shared memory and
descriptors of the harness itself that the runs left behind. OUT/soak.json (the runs and failures
recorded so far) is rewritten as runs end, at most once a second, and with OUT/report.html /
OUT/report.md every --report-every while it runs; OUT/results.jsonl has one line per
run and, as with `run`, only failing runs (and the first 3 passes of each scenario or command) keep files.
Kill it at any moment and `--resume` continues with the rest of the budget: no finished run is
lost and none is counted twice. A soak or campaign already in --out is refused unless --resume
continues it or --replace starts a new soak there. A write that fails (a full disk) stops the soak with everything
recorded so far intact. Shards as `run` does (--shard, or the scheduler's variables).
Exit status: 0 no run failed and the harness leaked nothing, 1 otherwise, 2 for usage or output
errors, 130 when interrupted (resume it).)";

struct raw_args {
  std::uint64_t repeat = 1;
  std::string timeout, grace = "1s", seed, out = "faultline-out", shard, faults, stacks = "auto";
  std::uint64_t jobs = 1;
  std::string log_limit = "4MiB";
  std::string keep = "failures";
  std::string crash = "auto";
  bool json = false, until_fail = false, no_stacks = false, all = false, resume = false, replace = false, late_cuda = false;
  std::vector<std::string> env, names;
  double target_rate = 0;
  CLI::Option* repeat_opt = nullptr;
  CLI::Option* target_opt = nullptr;
};

struct settings {
  std::uint64_t repeat = 1;
  std::optional<std::chrono::milliseconds> timeout;
  std::chrono::milliseconds grace{1000};
  std::uint64_t log_limit = default_log_limit_bytes;
  unsigned jobs = 1;
  std::uint64_t seed = 0;
  fs::path out;
  bool json = false;
  shard part;
  scheduled_shard sharding;      // where `part` came from: its source and the variables it consumed
  std::vector<std::string> env;  // base environment of the runs
  std::vector<std::string> user_env;  // the --env K=V pairs, for repro lines
  std::optional<double> target_rate;
  stack_options stacks;
  crash_capture crash = crash_capture::automatic;
  std::string crash_used;  // what the campaign used (crash resolved on this machine)
  std::string faults;
  bool until_fail = false;
  keep_policy keep = keep_policy::failures;
  bool resume = false;
  bool replace = false;
  bool seed_given = false;    // --seed was on the command line
  bool repeat_given = false;  // --repeat was on the command line
};

// A run's output reaches its log through a pipe (output_capture.h); past the limit the log keeps
// its head and tail.
void add_log_limit(CLI::App* sub, std::string& limit) {
  sub->add_option("--log-limit", limit,
                  "bound on each run's log, e.g. 512KiB, 16MiB, 0 for none (default 4MiB): past it the log keeps "
                  "its first and last halves and says how much was dropped between them");
}

// "4MiB", "512k", "0": bytes (k, KiB, kB and the like all count 1024).
std::uint64_t parse_log_limit(const std::string& text) {
  std::string value = text;
  if (value.empty() || value.find('-') != std::string::npos)
    throw usage_error{"--log-limit '" + text + "': expected a size such as 4MiB, 512KiB or 0"};
  std::string why;
  try {
    why = CLI::AsSizeValue(false)(value);  // rewrites `value` into bytes
  } catch (const CLI::Error& e) {  // a product past 64 bits
    why = e.what();
  }
  std::uint64_t bytes = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), bytes);
  if (!why.empty() || ec != std::errc() || p != value.data() + value.size())
    throw usage_error{"--log-limit '" + text + "': expected a size such as 4MiB, 512KiB or 0" +
                      (why.empty() ? std::string() : " (" + why + ")")};
  return bytes;
}

// What to do with a campaign already in --out: without one of these it is refused (campaign.h).
void add_out_choice(CLI::App* sub, bool& resume, bool& replace, const std::string& what) {
  sub->add_flag("--resume", resume,
                what == "soak" ? "continue the soak in --out with what is left of its budget (--out must hold one)"
                               : "continue the campaign in --out (it must hold one): runs already in its results.jsonl are "
                                 "counted, not run again (--seed and --repeat default to the campaign's; other options that "
                                 "number the runs must match)");
  sub->add_flag("--replace", replace,
                "start a new " + what + " in --out even though it holds one, removing that one's results, logs and run "
                "directories (without --resume or --replace, an --out holding a campaign or soak is refused)");
}

void add_timeout_option(CLI::App* sub, std::string& timeout) {
  sub->add_option("--timeout", timeout, "outer timeout of each run, e.g. 500ms, 30s, 2m");
}

void add_faults_option(CLI::App* sub, std::string& faults) {
  sub->add_option("--faults", faults, "fault spec given to every run as FAULTLINE_FAULTS");
}

// How a user's command runs, beyond the options every campaign has: exec's and `soak -- CMD`'s.
struct command_flags {
  bool no_preload = false, late_cuda = false;
  std::uint64_t slots = 1;
};

void add_command_flags(CLI::App* sub, command_flags& f) {
  sub->add_flag("--no-preload", f.no_preload, "do not preload the agent");
  sub->add_option("--slots", f.slots,
                  "the share of --jobs one run takes (default 1): a run starting N processes with a device context "
                  "each declares N, so --jobs J never has more than J at once (as the catalog's scenarios declare theirs)")
      ->check(positive_count);
  sub->add_flag("--late-cuda", f.late_cuda,
                "fail a run whose processes make CUDA runtime or driver calls after the runtime's teardown "
                "(answered cudaErrorCudartUnloading / CUDA_ERROR_DEINITIALIZED), signed with the call and its "
                "callers: the agent becomes the CUDA injection library (CUDA_INJECTION64_PATH) and enables CUPTI's "
                "callbacks when main returns or exit() begins; driver calls the driver answers after its own "
                "teardown, which CUPTI does not report, are seen by a stub before every driver entry point (about "
                "0.5 ns a call until exit). Off by default: it changes exit races. Runtime calls need "
                "libcupti.so.13 on the loader's path or beside the agent; FAULTLINE_LATE_CUDA=debug says what it sees");
}

void add_common(CLI::App* sub, raw_args& a, bool with_faults) {
  a.repeat_opt = sub->add_option("--repeat,-n", a.repeat, "runs of each scenario or command (default 1; verify: 50; with --until-fail: 10000)")
                     ->check(positive_count);
  add_timeout_option(sub, a.timeout);
  sub->add_option("--jobs,-j", a.jobs, "runs at once (default 1; at most 1024; never more than there are runs)")
      ->check(positive_count);
  sub->add_option("--seed", a.seed, "base seed S: run k gets S+k (default: from the clock, printed)");
  sub->add_option("--out,-o", a.out, "output directory (default faultline-out; the last one given counts)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub->add_flag("--json", a.json, "print one JSON summary object per line to stdout");
  sub->add_option("--shard", a.shard, "perform only shard i of n (i/n): the runs k with k mod n == i");
  sub->add_option("--env", a.env, "set K=V in every run's environment (repeatable)")->allow_extra_args(false);
  a.target_opt = sub->add_option("--target-rate", a.target_rate, "report the runs still needed to claim a failure rate <= P at 95%");
  sub->add_flag("--no-stacks", a.no_stacks, "do not capture stacks of hung runs");
  sub->add_option("--stacks", a.stacks, "stack capture: auto (gdb, else eu-stack, else libdwfl in the harness, else agent, else /proc), gdb, eu-stack, libdwfl, agent, proc, none");
  sub->add_option("--grace", a.grace, "time between SIGTERM and SIGKILL when ending a run (default 1s)");
  add_log_limit(sub, a.log_limit);
  sub->add_option("--crash-capture", a.crash,
                  "how a crash is captured: auto (default: every thread's stack from the kernel's core dump where "
                  "the kernel writes one the harness can read, else the signal and phase only; neither touches the crashing "
                  "process before its fault, but a core holds it while it is written, which changes races running beside "
                  "it: measure exit-race rates of GPU programs at --jobs > 1 with none), core, none; or, perturbing exit races (a signal handler runs in the crashing process): outside (it "
                  "stops there and its whole tree is captured live), minimal (faulting frame only), inside (the "
                  "crashing thread unwinds itself)");
  sub->add_option("--keep", a.keep,
                  "whose log and run directory stay once recorded: failures (default: every run that did not pass, "
                  "and the first 3 passes of each scenario or command), all, none (no pass)");
  if (with_faults) {
    add_faults_option(sub, a.faults);
    sub->add_flag("--until-fail", a.until_fail, "stop starting runs after the first failure");
  }
  add_out_choice(sub, a.resume, a.replace, "campaign");
}

// The shard: --shard i/n, else the scheduler's variables, else the whole campaign.
scheduled_shard shard_for(const std::string& flag) {
  if (!flag.empty()) {
    auto sh = parse_shard(flag);
    if (!sh) throw usage_error{sh.error().message()};
    return {*sh, "", {}};
  }
  auto sh = shard_from_scheduler();
  if (!sh) throw usage_error{sh.error().message()};
  return *sh ? std::move(**sh) : scheduled_shard{};
}

// ", shard i/n (SOURCE)" for a campaign's header line; "" for the whole campaign.
std::string shard_header(const scheduled_shard& sh) {
  if (sh.part.count < 2) return "";
  return ", shard " + sh.part.to_string() + (sh.source.empty() ? "" : " (" + sh.source + ")");
}

// The runs get faultline's environment without the sharding variables it consumed (a gtest
// program would otherwise shard itself again), plus --env.
std::vector<std::string> run_environment(const std::vector<std::string>& user_env, const scheduled_shard& sh) {
  std::vector<std::string> env = current_environment();
  for (const char* k : {"GTEST_TOTAL_SHARDS", "GTEST_SHARD_INDEX", "GTEST_SHARD_STATUS_FILE"}) set_env(env, k, std::nullopt);
  for (const auto& k : sh.consumed) set_env(env, k, std::nullopt);
  for (const auto& kv : user_env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw usage_error{"--env '" + kv + "': expected K=V"};
    std::string key = kv.substr(0, eq);
    if (key == "FAULTLINE_SEED" || key == "FAULTLINE_FAULTS" || key == "FAULTLINE_RUN_DIR")
      throw usage_error{"--env " + key + ": set by faultline itself (use --seed / --faults)"};
    set_env(env, key, kv.substr(eq + 1));
  }
  return env;
}

// --timeout: none when not given.
std::optional<std::chrono::milliseconds> parse_timeout(const std::string& text) {
  if (text.empty()) return std::nullopt;
  auto t = parse_duration(text);
  if (!t) throw usage_error{"--timeout: " + t.error().message()};
  if (t->count() <= 0) throw usage_error{"--timeout must be positive"};
  return *t;
}

// A malformed spec is refused here, once, with its column: otherwise every run would start only
// to fail the same way.
void check_faults_flag(const std::string& text) {
  auto parsed = faults::parse(text);
  if (!parsed) throw usage_error{"--faults: " + parsed.error().message()};
  check_agent_points(*parsed);
}

settings resolve(const raw_args& a, std::uint64_t default_repeat) {
  settings s;
  s.repeat = a.repeat_opt->count() ? a.repeat : (a.until_fail ? 10000 : default_repeat);
  s.timeout = parse_timeout(a.timeout);
  auto g = parse_duration(a.grace);
  if (!g) throw usage_error{"--grace: " + g.error().message()};
  s.grace = *g;
  s.log_limit = parse_log_limit(a.log_limit);
  if (a.jobs > max_jobs)
    throw usage_error{"--jobs " + std::to_string(a.jobs) + ": at most " + std::to_string(max_jobs) + " runs at once"};
  s.jobs = static_cast<unsigned>(a.jobs);
  auto keep = keep_policy_from_string(a.keep);
  if (!keep) throw usage_error{"--keep '" + a.keep + "': expected failures, all or none"};
  s.keep = *keep;
  s.resume = a.resume;
  s.replace = a.replace;
  s.seed_given = !a.seed.empty();
  s.repeat_given = a.repeat_opt->count() > 0;
  if (!a.seed.empty()) {
    auto [p, ec] = std::from_chars(a.seed.data(), a.seed.data() + a.seed.size(), s.seed);
    if (ec != std::errc() || p != a.seed.data() + a.seed.size())
      throw usage_error{"--seed '" + a.seed + "': expected a non-negative integer"};
  } else {
    s.seed = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  }
  s.out = a.out;
  s.json = a.json;
  s.sharding = shard_for(a.shard);
  s.part = s.sharding.part;
  if (a.target_opt->count()) {
    if (!(a.target_rate > 0 && a.target_rate < 1)) throw usage_error{"--target-rate must be between 0 and 1 (exclusive), e.g. 0.01"};
    s.target_rate = a.target_rate;
  }
  auto method = stack_method_from_string(a.stacks);
  if (!method) throw usage_error{"--stacks '" + a.stacks + "': expected auto, gdb, eu-stack, libdwfl, agent, proc or none"};
  s.stacks.method = a.no_stacks ? stack_method::none : *method;
  check_faults_flag(a.faults);
  auto crash = crash_capture_from_string(a.crash);
  if (!crash) throw usage_error{"--crash-capture '" + a.crash + "': expected auto, core, none, outside, minimal or inside"};
  s.crash = *crash;
  s.faults = a.faults;
  s.until_fail = a.until_fail;

  s.env = run_environment(a.env, s.sharding);
  s.user_env = a.env;
  return s;
}

// A resumed campaign goes on with the seed and repeat count it was started with unless they are
// given again (run_campaign refuses other values, and any other change that renumbers runs).
void adopt_resumed_options(settings& s) {
  if (!s.resume) return;
  auto m = read_manifest(s.out);
  if (!m) throw usage_error{"--resume: " + m.error().message()};
  if (!*m) return;
  if (!s.seed_given) s.seed = (*m)->seed;
  if (!s.repeat_given) s.repeat = (*m)->repeat;
}

// gtest's protocol: a runner that supports sharding says so by touching this file.
void acknowledge_sharding() {
  if (const char* f = std::getenv("GTEST_SHARD_STATUS_FILE"); f && *f) {
    int fd = ::open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v > 0 && v < 0.001 ? "%.3f%%" : "%.1f%%", 100.0 * v);
  return buf;
}

struct painter {
  bool on;
  std::string red(const std::string& s) const { return on ? "\033[31m" + s + "\033[0m" : s; }
  std::string green(const std::string& s) const { return on ? "\033[32m" + s + "\033[0m" : s; }
};

// Takes the hold of --out that a campaign needs, once it is known that a campaign may start there
// (check_out_dir_choice): nothing in OUT is created or changed before that, except for the lock
// itself, which is taken first when OUT holds a campaign, so that a live one is named as busy.
// Prints why and returns nullopt when it may not.
std::optional<out_dir_lock> hold_out_dir(const fs::path& out, bool resume, bool replace, cli_context& ctx) {
  auto choice = check_out_dir_choice(out, resume, replace);
  if (!choice && choice.code() != core::errc::already_exists) {
    ctx.err << "faultline: error: " << choice.message() << "\n";
    return std::nullopt;
  }
  auto lock = out_dir_lock::acquire(out);
  if (!lock) {
    ctx.err << "faultline: error: " << lock.error().message() << "\n";
    return std::nullopt;
  }
  if (choice) choice = check_out_dir_choice(out, resume, replace);  // what a campaign that just ended left
  if (!choice) {
    ctx.err << "faultline: error: " << choice.message() << "\n";
    return std::nullopt;
  }
  return std::move(*lock);
}

// Runs the campaign, warning about anything the final sweep had to clean up. Returns the
// campaign result, or nullopt after printing why it could not run.
std::optional<campaign_result> perform(const std::vector<variant>& variants, settings& s, cli_context& ctx) {
  campaign_options o;
  o.variants = variants;
  o.repeat = s.repeat;
  o.seed = s.seed;
  o.until_fail = s.until_fail;
  o.jobs = s.jobs;
  o.part = s.part;
  o.out_dir = s.out;
  o.grace = s.grace;
  o.log_limit_bytes = s.log_limit;
  o.stacks = s.stacks;
  o.crash = s.crash;
  o.env = s.env;
  o.progress = &ctx.err;
  o.progress_tty = ctx.err_tty;
  o.cancel = ctx.cancel;
  o.keep = s.keep;
  o.resume = s.resume;
  o.replace = s.replace;
  o.warn = [&ctx](const std::string& text) { ctx.err << "faultline: warning: " << text << "\n"; };
  // Refused before any header line when another campaign holds the directory, or when it holds
  // one and neither --resume nor --replace says what to do with it.
  auto lock = hold_out_dir(s.out, s.resume, s.replace, ctx);
  if (!lock) return std::nullopt;
  o.out_lock = &*lock;
  ctx.err << "faultline: " << (s.resume ? "resuming, " : "") << "seed " << s.seed << ", " << s.repeat
          << (s.repeat == 1 ? " run" : " runs") << " of "
          << variants.size() << (variants.size() == 1 ? " variant" : " variants")
          << shard_header(s.sharding) << ", results in "
          << (s.out / "results.jsonl").string() << "\n";
  {
    std::string why;
    const bool in_run_dir = !variants.empty() && variants.front().in_run_dir;
    std::error_code ec;
    if (in_run_dir) fs::create_directories(s.out / "runs", ec);  // where the runs' cores will land
    const crash_capture used = resolve_crash_capture(s.crash, &why, in_run_dir ? fs::absolute(s.out / "runs") : fs::path());
    ctx.err << "faultline: containment " << containment_summary() << "\n";
    s.crash_used = to_string(used);
    ctx.err << "faultline: crash capture " << to_string(used);
    if (used == crash_capture::core) ctx.err << " (each crash's core dump is read: every thread's stack)";
    if (used == crash_capture::core && !in_run_dir && s.jobs > 1 && !core_names_are_unique())
      ctx.err << " (core_pattern names one core file per directory: each core is held open as it appears, so runs"
                 " crashing together keep their own; a core replaced within microseconds of its creation is still"
                 " lost, which "
              << core_handler_hint << ")";
    if (!why.empty()) ctx.err << " (" << why << ")";
    if (used == crash_capture::none && s.crash == crash_capture::automatic)
      ctx.err << "; --crash-capture outside takes stacks but changes how exit races end";
    if (used == crash_capture::outside || used == crash_capture::minimal || used == crash_capture::inside)
      ctx.err << ": a signal handler runs in the crashing process, which changes how exit races end";
    ctx.err << "\n";
  }
  acknowledge_sharding();
  auto r = run_campaign(o);
  if (!r) {
    ctx.err << "faultline: error: " << r.error().message() << "\n";
    return std::nullopt;
  }
  if (r->resumed) {
    ctx.err << "faultline: " << r->resumed << (r->resumed == 1 ? " run was" : " runs were")
            << " already recorded, " << r->performed << " performed now\n";
  }
  if (!r->stray_pids.empty()) {
    ctx.err << "faultline: warning: killed " << r->stray_pids.size() << " process(es) no run could be attributed:";
    for (int p : r->stray_pids) ctx.err << " " << p;
    ctx.err << "\n";
  }
  if (!r->stray_shm.empty()) {
    ctx.err << "faultline: warning: removed shared memory left by the runs:";
    for (const auto& n : r->stray_shm) ctx.err << " /dev/shm/" << n;
    ctx.err << "\n";
  }
  return std::move(*r);
}

nlohmann::json summary_json(const variant_summary& v, const settings& s, const std::string& repro) {
  auto j = to_json(v);
  j["repro"] = repro.empty() ? nlohmann::json(nullptr) : nlohmann::json(repro);
  j["seed"] = s.seed;
  j["containment"] = containment().summary;
  j["crash_capture"] = s.crash_used;
  if (s.target_rate) {
    auto n = runs_to_claim(v.failures, *s.target_rate);
    j["target_rate"] = *s.target_rate;
    j["runs_needed"] = n ? nlohmann::json(*n > v.runs ? *n - v.runs : 0) : nlohmann::json(nullptr);
  }
  return j;
}

std::string points_warning(const std::vector<std::string>& points) {
  std::string text = "warning: enabled fault points never reached in any run: ";
  for (std::size_t i = 0; i < points.size(); ++i) text += (i ? ", " : "") + points[i];
  return text + " (a misspelt point, or every run ended before it got there)";
}

void print_human(const variant_summary& v, const settings& s, const std::string& repro, const painter& paint,
                 std::ostream& out) {
  out << v.name << ": " << v.runs << (v.runs == 1 ? " run" : " runs");
  for (const auto& [o, n] : v.outcomes)
    if (n) out << ", " << to_string(o) << " " << n;
  std::string rate = "failure rate " + percent(v.rate.rate) + " (95% CI " + percent(v.rate.lower95) + " - " +
                     percent(v.rate.upper95) + ")";
  out << "; " << (v.failures ? paint.red(rate) : rate) << "\n";
  for (const auto& g : v.signatures) {
    out << "  " << g.count << "x " << to_string(g.result) << (g.when == phase::none ? "" : "/" + std::string(to_string(g.when)))
        << "  " << g.signature << "\n      first: " << g.first_run << "  " << (s.out / g.first_log).string() << "\n";
    if (!g.first_stacks.empty()) out << "      stacks: " << (s.out / g.first_stacks).string() << "\n";
    // The top of the stack (the record and --json keep top_frames_kept).
    for (std::size_t i = 0; i < g.first_frames.size() && i < 5; ++i) out << "        #" << i << "  " << g.first_frames[i] << "\n";
  }
  for (const auto& l : v.late_cuda)
    out << "  late CUDA calls: " << l.api << " in " << l.runs << (l.runs == 1 ? " run (" : " runs (") << l.calls
        << (l.calls == 1 ? " call)" : " calls)") << "  " << l.signature << "\n";
  if (v.points_never_reached && !v.points_never_reached->empty()) out << "  " << points_warning(*v.points_never_reached) << "\n";
  if (!repro.empty()) out << "  repro: " << repro << "\n";
  if (s.target_rate) {
    auto n = runs_to_claim(v.failures, *s.target_rate);
    out << "  target rate " << percent(*s.target_rate) << ": ";
    if (!n) out << "out of reach\n";
    else if (*n <= v.runs) out << "claimed (" << v.runs << " runs suffice)\n";
    else out << (*n - v.runs) << " more runs without a failure\n";
  }
}

// The options that replay one run: its seed and faults, the timeout and environment it had.
// A repro line replays into a directory of its own (--replace: it is scratch), never into the
// campaign that printed it, which the default --out may hold; an --out added after it wins.
std::string repro_flags(const run_record& r, const settings& s) {
  std::string cmd = " --seed " + std::to_string(r.seed) + " --repeat 1 --out faultline-repro --replace";
  if (!r.faults.empty()) cmd += " --faults " + detail::shell_quote(r.faults);
  if (s.timeout) cmd += " --timeout " + format_duration(*s.timeout);
  for (const auto& kv : s.user_env) cmd += " --env " + detail::shell_quote(kv);
  return cmd;
}

int report_runs(const std::vector<variant>& variants, settings& s, cli_context& ctx,
                const std::function<std::string(const run_record&)>& repro) {
  auto r = perform(variants, s, ctx);
  if (!r) return exit_usage;
  painter paint{ctx.out_tty && !std::getenv("NO_COLOR")};
  bool all_pass = r->stray_pids.empty() && r->stray_shm.empty();
  for (const auto& v : r->summaries) {
    std::string rp = v.first_failure ? repro(*v.first_failure) : std::string();
    if (s.json) ctx.out << summary_json(v, s, rp).dump() << "\n";
    else print_human(v, s, rp, paint, ctx.out);
    all_pass = all_pass && v.failures == 0;
  }
  ctx.out.flush();
  if (r->interrupted) return exit_interrupted;
  return all_pass ? exit_ok : exit_failed;
}

core::result<std::vector<scenario_info>> catalog_for(const std::vector<std::string>& names, bool all) {
  auto catalog = load_catalog(scenario_binary());
  if (!catalog) return catalog;
  if (all || names.empty()) return catalog;
  return select(*catalog, names);
}

int cmd_list(bool json, cli_context& ctx) {
  auto catalog = load_catalog(scenario_binary());
  if (!catalog) {
    ctx.err << "faultline: error: " << catalog.error().message() << "\n";
    return exit_usage;
  }
  if (json) {
    ctx.out << to_json(*catalog).dump() << "\n";
    return exit_ok;
  }
  for (const auto& sc : *catalog) {
    ctx.out << sc.name << "  (timeout " << format_duration(sc.timeout)
            << (sc.slots > 1 ? ", " + std::to_string(sc.slots) + " slots of --jobs" : std::string()) << ")\n";
    if (!sc.description.empty()) ctx.out << "    " << sc.description << "\n";
    for (const auto& b : sc.bug_points)
      ctx.out << "    bug point " << b.point << ": detected in >= " << percent(b.detect_rate) << " of runs\n";
  }
  return exit_ok;
}

int cmd_run(const raw_args& a, cli_context& ctx) {
  if (a.all == !a.names.empty()) throw usage_error{a.all ? "give scenario names or --all, not both" : "name at least one SCENARIO, or --all"};
  settings s = resolve(a, 1);
  adopt_resumed_options(s);
  auto chosen = catalog_for(a.names, a.all);
  if (!chosen) throw usage_error{chosen.error().message()};
  const std::string bin = scenario_binary().string();
  std::vector<variant> variants;
  // Scenario binaries link the agent. With --late-cuda its library is preloaded too (as under
  // exec: its stubs must stand before the driver's entry points before CUDA looks them up) and
  // is the CUDA injection library; the two copies keep apart (hidden visibility).
  std::vector<std::string> env;
  if (a.late_cuda) {
    const fs::path agent = agent_library();
    std::error_code ec;
    if (agent.empty() || !fs::exists(agent, ec)) throw usage_error{"--late-cuda: the agent library is missing beside faultline"};
    auto preload = preload_environment(agent, s.env, true, false, false, false);
    if (!preload) throw usage_error{preload.error().message()};
    for (const auto& [name, value] : *preload) env.push_back(name + "=" + value);
  }
  for (const auto& sc : *chosen)
    variants.push_back(scenario_variant(sc, sc.name, s.faults, s.timeout.value_or(sc.timeout), env, bin));
  return report_runs(variants, s, ctx, [&](const run_record& r) {
    return "faultline run " + detail::shell_quote(r.name) + repro_flags(r, s) + (a.late_cuda ? " --late-cuda" : "");
  });
}

// The variant of a user's command as exec runs it (and `soak -- CMD`), named for its program.
// Refused (usage_error) before anything runs: a program that cannot be started would make every
// run an `error`; with the agent preloaded, a program reads only the families' points
// (faults/families.h), so a misspelt one is refused, and so is a function the program does not
// have. Without it (--no-preload) the program's own fault points (faultline::points) read the spec.
variant command_variant(const std::vector<std::string>& cmd, const command_flags& f, const std::string& faults,
                        std::optional<std::chrono::milliseconds> timeout, const std::vector<std::string>& env) {
  if (auto found = find_program(cmd[0]); !found) throw usage_error{"the command cannot be run: " + found.error().message()};
  const auto spec = *faults::parse(faults);  // checked by check_faults_flag
  if (!f.no_preload) {
    check_agent_points(spec, spec_reader::program);
    check_program_points(spec, cmd, env);
  }
  variant v;
  v.name = fs::path(cmd[0]).filename().string();
  v.argv = cmd;
  v.faults = faults;
  v.timeout = timeout.value_or(std::chrono::minutes(10));
  v.gtest_output = true;
  v.slots = static_cast<unsigned>(f.slots);
  if (f.no_preload) return v;
  const fs::path agent = agent_library();
  std::error_code ec;
  if (agent.empty() || !fs::exists(agent, ec)) return v;
  // LD_PRELOAD, and with --late-cuda or cuda/cuda... points the agent as the CUDA injection
  // library. --late-cuda is off by default: its callbacks, enabled as exit begins, change exit
  // races (an RMM 26.04 client with a detached worker crashed in 25/30 runs with them, 35/90 bare).
  auto preload = preload_environment(agent, env, f.late_cuda, names_cuda_runtime(spec), names_lock_points(spec),
                                     names_posix_points(spec));
  if (!preload) throw usage_error{preload.error().message()};
  for (const auto& [name, value] : *preload) v.env.push_back(name + "=" + value);
  return v;
}

// The exec line that replays one run of a command (exec's, or a command soak's).
std::string exec_repro(const run_record& r, const settings& s, const command_flags& f) {
  return std::string("faultline exec") + repro_flags(r, s) + (f.no_preload ? " --no-preload" : "") +
         (f.late_cuda && !f.no_preload ? " --late-cuda" : "") + " -- " + detail::shell_join(r.command);
}

int cmd_exec(const raw_args& a, const command_flags& f, std::vector<std::string> cmd, cli_context& ctx) {
  if (!cmd.empty() && cmd.front() == "--") cmd.erase(cmd.begin());
  if (cmd.empty()) throw usage_error{"no command: faultline exec [OPTIONS] -- CMD [ARGS...]"};
  settings s = resolve(a, 1);
  const variant v = command_variant(cmd, f, s.faults, s.timeout, s.env);
  adopt_resumed_options(s);
  return report_runs({v}, s, ctx, [&](const run_record& r) { return exec_repro(r, s, f); });
}

struct soak_args {
  std::vector<std::string> names;
  std::optional<std::vector<std::string>> command;  // the words after `--` (run_cli splits them off)
  std::string budget, out = "faultline-soak", seed, shard, report_every = "5m", keep = "failures", stacks = "auto",
                      crash = "auto", grace = "1s", timeout, faults;
  std::uint64_t jobs = 1;
  std::string log_limit = "4MiB";
  double timeout_scale = 1.0;
  bool resume = false, replace = false, json = false, no_stacks = false;
  std::vector<std::string> env;
  command_flags run_flags;  // a command's, as exec's
};

// The soak's options from its flags, all but what it soaks (choose_soaked); throws usage_error.
soak_options soak_flags(const soak_args& a, scheduled_shard& sharding, cli_context& ctx) {
  soak_options o;
  auto budget = parse_duration(a.budget);
  if (!budget) throw usage_error{"--budget: " + budget.error().message()};
  if (budget->count() <= 0) throw usage_error{"--budget must be positive, e.g. 8h"};
  o.budget = *budget;
  auto every = parse_duration(a.report_every);
  if (!every) throw usage_error{"--report-every: " + every.error().message()};
  if (every->count() <= 0) throw usage_error{"--report-every must be positive, e.g. 5m"};
  o.report_every = *every;
  auto grace = parse_duration(a.grace);
  if (!grace) throw usage_error{"--grace: " + grace.error().message()};
  o.grace = *grace;
  o.log_limit_bytes = parse_log_limit(a.log_limit);
  if (a.jobs > max_jobs) throw usage_error{"--jobs " + std::to_string(a.jobs) + ": at most " + std::to_string(max_jobs) + " runs at once"};
  o.jobs = static_cast<unsigned>(a.jobs);
  if (!(a.timeout_scale > 0) || a.timeout_scale > 1000) throw usage_error{"--timeout-scale must be in (0, 1000]"};
  o.timeout_scale = a.timeout_scale;
  if (!a.seed.empty()) {
    std::uint64_t seed = 0;
    auto [p, ec] = std::from_chars(a.seed.data(), a.seed.data() + a.seed.size(), seed);
    if (ec != std::errc() || p != a.seed.data() + a.seed.size()) throw usage_error{"--seed '" + a.seed + "': expected a non-negative integer"};
    o.seed = seed;
  }
  auto keep = keep_policy_from_string(a.keep);
  if (!keep) throw usage_error{"--keep '" + a.keep + "': expected failures, all or none"};
  o.keep = *keep;
  auto method = stack_method_from_string(a.stacks);
  if (!method) throw usage_error{"--stacks '" + a.stacks + "': expected auto, gdb, eu-stack, libdwfl, agent, proc or none"};
  o.stacks.method = a.no_stacks ? stack_method::none : *method;
  auto crash = crash_capture_from_string(a.crash);
  if (!crash) throw usage_error{"--crash-capture '" + a.crash + "': expected auto, core, none, outside, minimal or inside"};
  o.crash = *crash;
  sharding = shard_for(a.shard);
  o.part = sharding.part;
  o.out_dir = a.out;
  o.resume = a.resume;
  o.replace = a.replace;
  o.env = run_environment(a.env, sharding);
  o.progress = &ctx.err;
  o.progress_tty = ctx.err_tty;
  o.cancel = ctx.cancel;
  o.warn = [&ctx](const std::string& text) { ctx.err << "faultline: warning: " << text << "\n"; };
  // The soak's report is `faultline report`'s (reports/ is this floor's to call, not the soak's).
  o.write_report = [](const soak_report_request& q, std::ostream& out, std::ostream& err) {
    reports::report_options r;
    r.inputs = {q.out_dir.string()};
    r.html = q.html.string();
    r.markdown = q.markdown.string();
    r.plotly_js = q.plotly_js;
    r.title = q.title;
    return reports::report_command(r, out, err);
  };
  return o;
}

// What the soak runs: the scenarios named (default: all), or the user's command as exec runs it
// (checked as exec checks it: a program that cannot be started is refused). Options of the one
// are refused with the other rather than ignored.
void choose_soaked(const soak_args& a, soak_options& o) {
  if (a.command) {
    if (a.command->empty()) throw usage_error{"no command after --: faultline soak [OPTIONS] -- CMD [ARGS...]"};
    if (!a.names.empty())
      throw usage_error{"scenario names and a command (-- " + detail::shell_join(*a.command) +
                        "): a soak runs scenarios or one command, not both"};
    if (a.timeout_scale != 1.0) throw usage_error{"--timeout-scale multiplies the scenarios' timeouts; a command's is --timeout"};
    check_faults_flag(a.faults);
    o.command = command_variant(*a.command, a.run_flags, a.faults, parse_timeout(a.timeout), o.env);
    return;
  }
  const std::pair<bool, const char*> command_only[] = {{!a.timeout.empty(), "--timeout"},
                                                       {!a.faults.empty(), "--faults"},
                                                       {a.run_flags.no_preload, "--no-preload"},
                                                       {a.run_flags.late_cuda, "--late-cuda"},
                                                       {a.run_flags.slots != 1, "--slots"}};
  for (const auto& [given, flag] : command_only)
    if (given)
      throw usage_error{std::string(flag) + " is for a command soak (faultline soak [OPTIONS] -- CMD): a scenario's runs "
                        "take its own timeout (--timeout-scale) and faults drawn from its fault space"};
  auto chosen = catalog_for(a.names, a.names.empty());
  if (!chosen) throw usage_error{chosen.error().message()};
  o.scenarios = std::move(*chosen);
  o.scenario_binary = scenario_binary();
}

// The soak's header lines (what, how long, containment, crash capture); returns the crash
// capture used. A scenario's runs leave their cores in OUT/runs, created here.
std::string print_soak_header(const soak_options& o, const scheduled_shard& sharding, cli_context& ctx) {
  fs::path cores_dir;
  if (!o.command) {
    std::error_code ec;
    fs::create_directories(o.out_dir / "runs", ec);
    cores_dir = fs::absolute(o.out_dir / "runs");
  }
  std::string why;
  const crash_capture used = resolve_crash_capture(o.crash, &why, cores_dir);
  const std::string what = o.command ? "`" + detail::shell_join(o.command->argv) + "`"
                                     : std::to_string(o.scenarios.size()) + (o.scenarios.size() == 1 ? " scenario" : " scenarios");
  ctx.err << "faultline: soak of " << what << " for " << format_duration(o.budget) << (o.resume ? " (resuming)" : "")
          << shard_header(sharding) << ", " << o.jobs << (o.jobs == 1 ? " job" : " jobs") << ", results in "
          << (o.out_dir / "results.jsonl").string() << "\n";
  ctx.err << "faultline: containment " << containment_summary() << "; crash capture " << to_string(used)
          << (why.empty() ? "" : " (" + why + ")") << "\n";
  return std::string(to_string(used));
}

// What the soak found, a line per scenario or command with the repro of its first failure;
// returns the exit status.
int print_soak_result(const soak_args& a, const soak_options& o, const soak_result& r, const std::string& crash_used,
                      cli_context& ctx) {
  const campaign_result& c = r.campaign;
  ctx.err << "faultline: seed " << r.seed << "; " << format_duration(std::chrono::duration_cast<std::chrono::seconds>(r.spent))
          << " of the " << format_duration(o.budget)
          << " budget spent" << (c.resumed ? "; " + std::to_string(c.resumed) + " runs were recorded before this resume" : "")
          << "\n";
  painter paint{ctx.out_tty && !std::getenv("NO_COLOR")};
  settings s;
  s.out = o.out_dir;
  s.seed = r.seed;
  s.crash_used = crash_used;
  s.user_env = a.env;
  if (o.command) s.timeout = parse_timeout(a.timeout);
  bool clean = r.harness_leaks.empty() && c.stray_pids.empty() && c.stray_shm.empty();
  for (const auto& v : c.summaries) {
    std::string rp;
    if (v.first_failure)
      rp = o.command ? exec_repro(*v.first_failure, s, a.run_flags)
                     : "faultline run " + detail::shell_quote(v.name) + repro_flags(*v.first_failure, s);
    if (a.json) ctx.out << summary_json(v, s, rp).dump() << "\n";
    else print_human(v, s, rp, paint, ctx.out);
    clean = clean && v.failures == 0;
  }
  for (const auto& leak : r.harness_leaks) ctx.out << paint.red("harness leak: ") << leak << "\n";
  for (const auto& p : r.points_never_reached)
    ctx.out << "warning: fault-space point never reached: " << p << " (a misspelt point, or one the scenario never gets to)\n";
  if (!r.report_html.empty()) ctx.err << "faultline: report: " << fs::absolute(r.report_html).string() << "\n";
  if (!r.report_markdown.empty()) ctx.err << "faultline: summary: " << fs::absolute(r.report_markdown).string() << "\n";
  ctx.out.flush();
  if (c.interrupted) {
    ctx.err << "faultline: interrupted; continue with the same command and --resume\n";
    return exit_interrupted;
  }
  return clean ? exit_ok : exit_failed;
}

int cmd_soak(const soak_args& a, cli_context& ctx) {
  scheduled_shard sharding;
  soak_options o = soak_flags(a, sharding, ctx);
  choose_soaked(a, o);
  // Refused before anything in OUT changes: a live campaign there (busy), then a soak or
  // campaign there that neither --resume nor --replace was given for. run_soak checks both
  // again under its own hold of OUT.
  if (!hold_out_dir(o.out_dir, o.resume, o.replace, ctx)) return exit_usage;
  const std::string crash_used = print_soak_header(o, sharding, ctx);
  acknowledge_sharding();
  auto r = run_soak(o);
  if (!r) {
    ctx.err << "faultline: error: " << r.error().message() << "\n";
    return exit_usage;
  }
  return print_soak_result(a, o, *r, crash_used, ctx);
}

int cmd_verify(const raw_args& a, cli_context& ctx) {
  settings s = resolve(a, 50);
  adopt_resumed_options(s);
  auto chosen = catalog_for(a.names, a.names.empty());
  if (!chosen) throw usage_error{chosen.error().message()};
  const std::string bin = scenario_binary().string();
  struct row {
    std::string scenario, variant_label;
    bool clean;
    double required;
  };
  std::vector<variant> variants;
  std::vector<row> rows;
  for (const auto& sc : *chosen) {
    auto timeout = s.timeout.value_or(sc.timeout);
    variants.push_back(scenario_variant(sc, sc.name, "", timeout, {}, bin));
    rows.push_back({sc.name, "clean", true, 0.0});
    for (const auto& b : sc.bug_points) {
      variants.push_back(scenario_variant(sc, sc.name + "@" + b.point, b.faults, timeout, {}, bin));
      rows.push_back({sc.name, b.point, false, b.detect_rate});
    }
  }
  auto r = perform(variants, s, ctx);
  if (!r) return exit_usage;
  const auto& sums = r->summaries;
  painter paint{ctx.out_tty && !std::getenv("NO_COLOR")};

  bool all_ok = r->stray_pids.empty() && r->stray_shm.empty();
  std::vector<std::vector<std::string>> table = {{"scenario", "variant", "runs", "failures/detections", "rate", "required", "result"}};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& v = sums[i];
    const auto& rw = rows[i];
    const std::uint64_t errors = v.outcomes.at(outcome::error);
    const std::uint64_t hits = rw.clean ? v.failures : v.failures - errors;  // errors detect nothing
    const double rate = v.runs ? static_cast<double>(hits) / static_cast<double>(v.runs) : 0.0;
    const bool ok = v.runs == 0 || (rw.clean ? hits == 0 : (errors == 0 && rate >= rw.required));
    all_ok = all_ok && ok;
    std::string rp;
    if (rw.clean && v.first_failure) rp = "faultline run " + detail::shell_quote(rw.scenario) + repro_flags(*v.first_failure, s);
    if (!rw.clean && v.runs) {
      // Replay of the bug variant: the first run that did not detect it, or the first run.
      const auto& pick = v.first_pass ? v.first_pass : v.first_record;
      if (pick) rp = "faultline run " + detail::shell_quote(rw.scenario) + repro_flags(*pick, s);
    }
    if (s.json) {
      auto j = summary_json(v, s, rp);
      j["scenario"] = rw.scenario;
      j["variant"] = rw.variant_label;
      j["faults"] = variants[i].faults;
      j["check"] = rw.clean ? "no-failures" : "detected";
      j[rw.clean ? "failures" : "detections"] = hits;
      j["rate"] = rate;
      j["required_rate"] = rw.required;
      j["ok"] = ok;
      ctx.out << j.dump() << "\n";
    }
    table.push_back({rw.scenario, rw.variant_label, std::to_string(v.runs), std::to_string(hits), v.runs ? percent(rate) : "-",
                     rw.clean ? "= 0" : ">= " + percent(rw.required), ok ? "OK" : "FAIL"});
  }
  if (!s.json) {
    std::vector<std::size_t> width(table[0].size(), 0);
    for (const auto& line : table)
      for (std::size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
    for (std::size_t li = 0; li < table.size(); ++li) {
      std::string text;
      for (std::size_t c = 0; c < table[li].size(); ++c) {
        std::string cell = table[li][c];
        bool last = c + 1 == table[li].size();
        std::string pad = last ? "" : std::string(width[c] - cell.size() + 2, ' ');
        if (last && li > 0) cell = cell == "OK" ? paint.green(cell) : paint.red(cell);
        text += cell + pad;
      }
      ctx.out << text << "\n";
    }
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (sums[i].points_never_reached && !sums[i].points_never_reached->empty())
        ctx.out << rows[i].scenario << " " << rows[i].variant_label << ": " << points_warning(*sums[i].points_never_reached) << "\n";
    ctx.out << (all_ok ? "verify: all checks hold\n" : "verify: some checks FAILED\n");
  }
  ctx.out.flush();
  if (r->interrupted) return exit_interrupted;
  return all_ok ? exit_ok : exit_failed;
}

}  // namespace

int run_cli(const std::vector<std::string>& args, cli_context& ctx) {
  CLI::App app{about, "faultline"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  app.set_version_flag("--version", version_line(), "print the version and the commit faultline was built from");

  bool list_json = false;
  auto* list = app.add_subcommand("list", "list the scenarios of the scenario binary");
  list->add_flag("--json", list_json, "print the catalog as a JSON array");

  raw_args run_a, exec_a, verify_a;
  auto* run = app.add_subcommand("run", "run scenarios: faultline run SCENARIO... | --all [OPTIONS]");
  run->footer(run_about);
  run->add_option("scenario", run_a.names, "scenario names or patterns");
  run->add_flag("--all", run_a.all, "run every scenario");
  add_common(run, run_a, true);
  run->add_flag("--late-cuda", run_a.late_cuda,
                "fail a run whose processes make CUDA calls after the runtime's teardown (see exec --late-cuda): the "
                "agent's library is preloaded into the scenario binary (which links the agent) and becomes its CUDA "
                "injection library");

  auto* exec = app.add_subcommand("exec", "run a command: faultline exec [OPTIONS] -- CMD [ARGS...]");
  exec->footer(exec_about);
  add_common(exec, exec_a, true);
  command_flags exec_f;
  add_command_flags(exec, exec_f);
  std::vector<std::string> exec_cmd;
  exec->add_option("command", exec_cmd, "the command and its arguments, after --");

  auto* verify = app.add_subcommand("verify", "check that clean variants pass and bug points are detected");
  verify->footer(verify_about);
  verify->add_option("scenario", verify_a.names, "scenario names or patterns (default: all)");
  add_common(verify, verify_a, false);

  soak_args soak_a;
  auto* soak = app.add_subcommand(
      "soak", "soak scenarios or a command for a time budget: faultline soak [SCENARIO...] --budget DUR [OPTIONS] [-- CMD [ARGS...]]");
  soak->footer(soak_about);
  soak->add_option("scenario", soak_a.names, "scenario names or patterns (default: all; none with -- CMD)");
  soak->add_option("--budget", soak_a.budget, "time to spend, across resumes, e.g. 8h, 30m")->required();
  soak->add_option("--out,-o", soak_a.out, "output directory (default faultline-soak)");
  add_out_choice(soak, soak_a.resume, soak_a.replace, "soak");
  soak->add_option("--jobs,-j", soak_a.jobs, "runs at once (default 1; at most 1024)")->check(positive_count);
  soak->add_option("--seed", soak_a.seed, "the soak's seed (default: from the clock, printed; a resume keeps its own)");
  soak->add_option("--shard", soak_a.shard, "perform only shard i of n (i/n): the runs k with k mod n == i");
  soak->add_option("--report-every", soak_a.report_every, "how often OUT/report.html, OUT/report.md and OUT/soak.json are rewritten (default 5m)");
  soak->add_option("--timeout-scale", soak_a.timeout_scale, "multiply every scenario's timeout (a slow machine, a sanitizer build)");
  soak->add_option("--keep", soak_a.keep, "whose files stay: failures (default), all, none");
  soak->add_option("--stacks", soak_a.stacks, "stack capture of hung runs: auto, gdb, eu-stack, libdwfl, agent, proc, none");
  soak->add_flag("--no-stacks", soak_a.no_stacks, "do not capture stacks of hung runs");
  soak->add_option("--crash-capture", soak_a.crash, "as for run: auto (default), core, none, outside, minimal, inside");
  soak->add_option("--grace", soak_a.grace, "time between SIGTERM and SIGKILL when ending a run (default 1s)");
  add_log_limit(soak, soak_a.log_limit);
  soak->add_option("--env", soak_a.env, "set K=V in every run's environment (repeatable)")->allow_extra_args(false);
  soak->add_flag("--json", soak_a.json, "print one JSON summary object per scenario (or the command) to stdout");
  // A command soak's runs, as exec's (one definition each).
  add_timeout_option(soak, soak_a.timeout);
  add_faults_option(soak, soak_a.faults);
  add_command_flags(soak, soak_a.run_flags);

  std::string region_path;
  bool region_repair = false, region_json = false;
  auto* region = app.add_subcommand("region", "inspect (and --repair) a shared accounting region: faultline region PATH");
  region->add_option("path", region_path, "the region file (e.g. /dev/shm/faultline-accounting)")->required();
  region->add_flag("--repair", region_repair,
                   "reclaim dead processes' slots, repair slots left mid-update, recompute the aggregates (takes the lock)");
  region->add_flag("--json", region_json, "print the report as one JSON object");

  reports::report_options report_o;
  auto* report = app.add_subcommand("report", "write JUnit XML, Markdown and HTML reports: faultline report DIR... [--junit F] [--html F] [--markdown F]");
  report->footer(reports::report_help);
  report->add_option("dir", report_o.inputs, "campaign output directories, results.jsonl files, or directories of shard outputs")
      ->required();
  report->add_option("--junit", report_o.junit, "write JUnit XML to FILE");
  report->add_option("--html", report_o.html, "write the self-contained HTML report with plots to FILE");
  report->add_option("--markdown", report_o.markdown, "write the Markdown summary to FILE ('-': stdout)");
  report->add_option("--plotly-js", report_o.plotly_js, "plotly.js to embed in the HTML (default: $FAULTLINE_PLOTLY_JS, else python3-plotly's)");
  report->add_option("--title", report_o.title, "title of the HTML report (default 'faultline report')");

  reports::gate_options gate_o;
  auto* gate = app.add_subcommand("gate", "fail on a significant regression against a baseline: faultline gate --baseline F --current DIR");
  gate->footer(reports::gate_help);
  gate->add_option("--baseline", gate_o.baseline, "the baseline to compare with (written by --write-baseline)");
  gate->add_option("--write-baseline", gate_o.write_baseline, "write the baseline of the --current results to FILE instead");
  gate->add_option("--current", gate_o.current, "the results to judge: as faultline report's DIR (repeatable)")->required();
  gate->add_option("--alpha", gate_o.alpha, "significance level of each variant's one-sided Fisher exact test (default 0.01)");

  cores_options cores_o;
  auto* cores = add_cores_command(app, cores_o);

  // agent-env / agent-report (agent_dir.h): the agent for processes faultline does not start.
  agent_env_options agent_env_o;
  auto* agent_env = add_agent_env_command(app, agent_env_o);
  agent_report_options agent_report_o;
  auto* agent_report = add_agent_report_command(app, agent_report_o);
  // agent-env's --faults is refused exactly where exec's is (resolve()), and sets what exec's
  // does (cmd_exec: cuda/cuda... points make the agent the CUDA injection library).
  const spec_check check_faults = [](const std::string& text) -> core::result<spec_facts> {
    auto parsed = faults::parse(text);
    if (!parsed) return core::status(core::errc::invalid_argument, "--faults: " + parsed.error().message());
    try {
      check_agent_points(*parsed, spec_reader::program);
    } catch (const usage_error& e) {
      return core::status(core::errc::invalid_argument, e.message);
    }
    return spec_facts{names_cuda_runtime(*parsed), names_lock_points(*parsed), names_posix_points(*parsed)};
  };

  // CLI11 reports a misspelt subcommand as a missing one; name it instead.
  if (args.size() > 1 && !args[1].empty() && args[1][0] != '-' && args[1] != "list" && args[1] != "run" &&
      args[1] != "exec" && args[1] != "verify" && args[1] != "soak" && args[1] != "region" && args[1] != "report" &&
      args[1] != "gate" && args[1] != "cores" && args[1] != "agent-env" && args[1] != "agent-report") {
    ctx.err << "faultline: error: unknown subcommand '" << args[1]
            << "' (expected list, run, exec, verify, soak, region, report, gate, cores, agent-env or agent-report)\n"
            << "Run 'faultline --help' for usage.\n";
    return exit_usage;
  }
  // soak's command is everything after its first `--`, split off here: CLI11 would give those
  // words to the scenario names.
  std::vector<std::string> parsed_args = args;
  if (args.size() > 1 && args[1] == "soak") {
    if (auto mark = std::find(parsed_args.begin() + 2, parsed_args.end(), "--"); mark != parsed_args.end()) {
      soak_a.command.emplace(mark + 1, parsed_args.end());
      parsed_args.erase(mark, parsed_args.end());
    }
  }
  std::vector<const char*> argv;
  for (const auto& a : parsed_args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, ctx.out, ctx.err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, ctx.out, ctx.err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, ctx.out, ctx.err);
  } catch (const CLI::ParseError& e) {
    ctx.err << "faultline: error: " << e.what() << "\nRun 'faultline --help' for usage.\n";
    return exit_usage;
  }

  try {
    if (list->parsed()) return cmd_list(list_json, ctx);
    if (run->parsed()) return cmd_run(run_a, ctx);
    if (exec->parsed()) return cmd_exec(exec_a, exec_f, exec_cmd, ctx);
    if (verify->parsed()) return cmd_verify(verify_a, ctx);
    if (soak->parsed()) return cmd_soak(soak_a, ctx);
    if (region->parsed()) return region_command(region_path, region_repair, region_json, ctx.out, ctx.err);
    if (report->parsed()) return reports::report_command(report_o, ctx.out, ctx.err);
    if (gate->parsed()) return reports::gate_command(gate_o, ctx.out, ctx.err);
    if (cores->parsed()) return cores_command(cores_o, ctx.out, ctx.err);
    if (agent_env->parsed()) return agent_env_command(agent_env_o, check_faults, ctx.out, ctx.err);
    if (agent_report->parsed()) return agent_report_command(agent_report_o, ctx.out, ctx.err);
  } catch (const usage_error& e) {
    ctx.err << "faultline: error: " << e.message << "\nRun 'faultline --help' for usage.\n";
    return exit_usage;
  }
  return exit_usage;
}

}  // namespace faultline::harness
