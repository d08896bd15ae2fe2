#include "harness/cli_shared.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "faults/preload/detail/inlined_sites.h"
#include "faults/spec.h"
#include "harness/agent_dir.h"
#include "harness/detail/sys.h"
#include "harness/results/counted.h"
#include "harness/results/ranks.h"
#include "harness/results/stack_hints.h"
#include "harness/results/summary.h"
#include "harness/run/containment.h"
#include "harness/run/core_dump.h"
#include "harness/run/process.h"

namespace faultline::harness::cli_detail {

namespace {

// Replaces every `token` in `text` with `value`.
void replace_all(std::string& text, const std::string& token, const std::string& value) {
  for (auto at = text.find(token); at != std::string::npos; at = text.find(token, at + value.size()))
    text.replace(at, token.size(), value);
}

}  // namespace

std::string with_defaults(std::string text) {
  const std::pair<const char*, std::string> values[] = {
      {"{run_timeout}", format_duration(default_run_timeout)},
      {"{grace}", format_duration(default_grace)},
      {"{log_limit}", size_text(default_log_limit_bytes)},
      {"{jobs}", std::to_string(default_jobs)},
      {"{max_jobs}", std::to_string(max_jobs)},
      {"{repeat}", std::to_string(default_repeat)},
      {"{verify_repeat}", std::to_string(default_verify_repeat)},
      {"{until_fail_repeat}", std::to_string(default_until_fail_repeat)},
      {"{kept_passes}", std::to_string(default_kept_passes)},
      {"{report_every}", format_duration(default_report_every)},
      {"{out}", default_campaign_out_dir},
      {"{soak_out}", default_soak_out_dir},
  };
  for (const auto& [token, value] : values) replace_all(text, token, value);
  return text;
}

std::string size_text(std::uint64_t bytes) {
  if (bytes != 0 && bytes % (std::uint64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes != 0 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes);
}

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


// A run's output reaches its log through a pipe (output_capture.h); past the limit the log keeps
// its head and tail.
void add_log_limit(CLI::App* sub, std::string& limit) {
  sub->add_option("--log-limit", limit,
                  with_defaults("bound on each run's log, e.g. 512KiB, 16MiB, 0 for none (default {log_limit}): past it "
                                "the log keeps its first and last halves and says how much was dropped between them"));
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
                "teardown, which CUPTI does not report, are seen by a stub before every driver entry point (until "
                "exit +0.9 and +1.4 ns a call in two runs on an H200, records/gpu/raw-2026-11-26-late-driver). Off by "
                "default: it changes exit races. Runtime calls need "
                "libcupti.so.13 on the loader's path or beside the agent; FAULTLINE_LATE_CUDA=debug says what it sees");
}

void add_common(CLI::App* sub, raw_args& a, bool with_faults) {
  a.repeat_opt = sub->add_option("--repeat,-n", a.repeat, with_defaults("runs of each scenario or command (default {repeat}; verify: {verify_repeat}; with --until-fail: {until_fail_repeat})"))
                     ->check(positive_count);
  add_timeout_option(sub, a.timeout);
  sub->add_option("--jobs,-j", a.jobs, with_defaults("runs at once (default {jobs}; at most {max_jobs}; never more than there are runs)"))
      ->check(positive_count);
  sub->add_option("--schedule", a.schedule,
                  "what a run in flight takes of --jobs: declared (the CPU its scenario declares, in --jobs CPUs: "
                  "scenarios that wait on their timeouts, children or locks declare little, so up to 4 x --jobs "
                  "of them run at once; a command declares nothing and takes one job, as with slots), slots (its "
                  "slots, one unless --slots, from its start to its end: never more than --jobs at once) or cpu "
                  "(its slots for its first 250 ms, then what its cgroup measures it using) (default " + a.schedule + ")");
  sub->add_option("--seed", a.seed, "base seed S: run k gets S+k (default: from the clock, printed)");
  sub->add_option("--out,-o", a.out, with_defaults("output directory (default {out}; the last one given counts)"))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub->add_flag("--json", a.json, "print one JSON summary object per line to stdout");
  sub->add_option("--shard", a.shard, "perform only shard i of n (i/n): the runs k with k mod n == i");
  sub->add_option("--env", a.env, "set K=V in every run's environment (repeatable)")->allow_extra_args(false);
  a.target_opt = sub->add_option("--target-rate", a.target_rate, "report the runs still needed to claim a failure rate <= P at 95%");
  sub->add_flag("--no-stacks", a.no_stacks, "do not capture stacks of hung runs");
  sub->add_option("--stacks", a.stacks, "stack capture: auto (gdb, else eu-stack, else libdwfl in the harness, else agent, else /proc), gdb, eu-stack, libdwfl, agent, proc, none");
  sub->add_option("--grace", a.grace, with_defaults("time between SIGTERM and SIGKILL when ending a run (default {grace})"));
  add_log_limit(sub, a.log_limit);
  sub->add_option("--crash-capture", a.crash,
                  "how a crash is captured: auto (default: every thread's stack from the kernel's core dump where "
                  "the kernel writes one the harness can read, else the signal and phase only; neither touches the crashing "
                  "process before its fault, but a core holds it while it is written, which changes races running beside "
                  "it: measure exit-race rates of GPU programs at --jobs > 1 with none), core, none; or, perturbing exit races (a signal handler runs in the crashing process): outside (it "
                  "stops there and its whole tree is captured live), minimal (faulting frame only), inside (the "
                  "crashing thread unwinds itself)");
  sub->add_option("--keep", a.keep,
                  with_defaults("whose log and run directory stay once recorded: failures (default: every run that did not "
                                "pass, and the first {kept_passes} passes of each scenario or command), all, none (no pass)"));
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

settings resolve(const raw_args& a, std::uint64_t repeat_default) {
  settings s;
  s.repeat = a.repeat_opt->count() ? a.repeat : (a.until_fail ? default_until_fail_repeat : repeat_default);
  s.timeout = parse_timeout(a.timeout);
  auto g = parse_duration(a.grace);
  if (!g) throw usage_error{"--grace: " + g.error().message()};
  s.grace = *g;
  s.log_limit = parse_log_limit(a.log_limit);
  if (a.jobs > max_jobs)
    throw usage_error{"--jobs " + std::to_string(a.jobs) + ": at most " + std::to_string(max_jobs) + " runs at once"};
  s.jobs = static_cast<unsigned>(a.jobs);
  auto schedule = schedule_kind_from_string(a.schedule);
  if (!schedule) throw usage_error{"--schedule '" + a.schedule + "': expected declared, slots or cpu"};
  s.schedule = *schedule;
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
  o.schedule = s.schedule;
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
  for (const auto& v : variants) {
    for (const auto& n : v.notes) ctx.err << "faultline: note: " << n << "\n";
  }
  {
    std::string why;
    const bool in_run_dir = !variants.empty() && variants.front().in_run_dir;
    std::error_code ec;
    if (in_run_dir) fs::create_directories(s.out / "runs", ec);  // where the runs' cores will land
    const crash_capture used = resolve_crash_capture(s.crash, &why, in_run_dir ? fs::absolute(s.out / "runs") : fs::path());
    ctx.err << "faultline: containment " << containment_summary() << "\n";
    if (s.schedule == schedule_kind::cpu)
      ctx.err << "faultline: schedule cpu: " << s.jobs << (s.jobs == 1 ? " CPU" : " CPUs")
              << " of runs' measured use, up to " << std::min(max_jobs, s.jobs * cpu_overcommit) << " runs at once\n";
    const unsigned declared_most = declared_most_in_flight(variants, s.jobs);
    if (s.schedule == schedule_kind::declared && declared_most > s.jobs)
      ctx.err << "faultline: schedule declared: " << s.jobs << (s.jobs == 1 ? " CPU" : " CPUs")
              << " of the runs' declared use, up to " << declared_most << " runs at once\n";
    s.crash_used = to_string(used);
    ctx.err << "faultline: crash capture " << to_string(used);
    if (used == crash_capture::core) ctx.err << " (each crash's core dump is read: every thread's stack)";
    const bool overlapping = s.jobs > 1 || s.schedule == schedule_kind::cpu ||
                             (s.schedule == schedule_kind::declared && declared_most > 1);
    if (used == crash_capture::core && !in_run_dir && overlapping && !core_names_are_unique())
      ctx.err << " (" << shared_core_name_note << ")";
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
    ctx.err << "faultline: warning: killed " << counted(r->stray_pids.size(), "process", "processes") << " no run could be attributed to:";
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

const char* const shared_core_name_note =
    "core_pattern gives every core in a directory the same name: faultline opens each core as soon as it appears, so "
    "runs that crash together keep their own, but a core that the next crash replaces within microseconds is lost; "
    "`faultline cores --install` (as root) keeps every core";

std::string interrupted_line(const campaign_result& r) {
  std::string s = "interrupted: ";
  if (r.planned) {
    const std::uint64_t left = r.not_performed();
    s += std::to_string(left) + " of " + std::to_string(r.planned) + (r.planned == 1 ? " run" : " runs") + " not performed";
  } else {
    s += "the campaign did not finish";
  }
  return s + "; --resume continues";
}

void mark_interrupted(nlohmann::json& j, const campaign_result& r) {
  j["interrupted"] = r.interrupted;
  if (!r.interrupted || !r.planned) return;
  j["campaign_runs_planned"] = r.planned;
  j["campaign_runs_not_performed"] = r.not_performed();
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
    if (g.result == outcome::hang)
      if (const std::string hint = python_frames_hint(g.first_frames); !hint.empty()) out << "      (" << hint << ")\n";
    // A distributed run's ranks: each one's state, and the pid its stacks are under.
    if (!g.first_ranks.empty()) out << "      " << ranks_verdict(g.first_ranks) << "\n";
    for (const auto& k : g.first_ranks)
      out << "        " << (k.rank >= 0 ? "rank " : "") << rank_label(k) << (k.pid && k.rank >= 0 ? "  pid " + std::to_string(k.pid) : "")
          << "  " << rank_detail(k) << "\n";
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
    else if (*n <= v.runs) out << "claimed (" << counted(v.runs, "run") << (v.runs == 1 ? " suffices)\n" : " suffice)\n");
    else out << counted(*n - v.runs, "more run", "more runs") << " without a failure\n";
  }
}

std::vector<std::string> replay_options(std::optional<std::chrono::milliseconds> timeout, const std::vector<std::string>& user_env,
                                        crash_capture crash, bool no_preload, bool late_cuda) {
  std::vector<std::string> o;
  if (timeout) o.insert(o.end(), {"--timeout", format_duration(*timeout)});
  for (const auto& kv : user_env) o.insert(o.end(), {"--env", kv});
  // A signal handler in the crashing process changes how exit races end, and the capture used
  // decides the signature: a replay that is to show the same failure captures it the same way.
  if (crash != crash_capture::automatic) o.insert(o.end(), {"--crash-capture", std::string(to_string(crash))});
  if (no_preload) o.push_back("--no-preload");
  if (late_cuda && !no_preload) o.push_back("--late-cuda");
  return o;
}

// The options that replay one run: its seed and faults, and the options it recorded (`replay`).
// A repro line replays into a directory of its own (--replace: it is scratch), never into the
// campaign that printed it, which the default --out may hold; an --out added after it wins.
std::string repro_flags(const run_record& r) {
  std::string cmd = " --seed " + std::to_string(r.seed) + " --repeat 1 --out faultline-repro --replace";
  if (!r.faults.empty()) cmd += " --faults " + detail::shell_quote(r.faults);
  for (const auto& word : r.replay) cmd += " " + detail::shell_quote(word);
  return cmd;
}

// The exec line that replays one run of a command (exec's, or a command soak's).
std::string exec_repro(const run_record& r) {
  return std::string("faultline exec") + repro_flags(r) + " -- " + detail::shell_join(r.command);
}

int report_runs(const std::vector<variant>& variants, settings& s, cli_context& ctx,
                const std::function<std::string(const run_record&)>& repro) {
  auto r = perform(variants, s, ctx);
  if (!r) return exit_usage;
  painter paint{ctx.out_tty && !std::getenv("NO_COLOR")};
  bool all_pass = r->stray_pids.empty() && r->stray_shm.empty();
  for (const auto& v : r->summaries) {
    std::string rp = v.first_failure ? repro(*v.first_failure) : std::string();
    if (s.json) {
      auto j = summary_json(v, s, rp);
      mark_interrupted(j, *r);
      ctx.out << j.dump() << "\n";
    } else {
      print_human(v, s, rp, paint, ctx.out);
    }
    all_pass = all_pass && v.failures == 0;
  }
  if (r->interrupted && !s.json) ctx.out << paint.red(interrupted_line(*r)) << "\n";
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

// The variant of a user's command as exec runs it (and `soak -- CMD`), named for its program.
// Refused (usage_error) before anything runs: a program that cannot be started would make every
// run an `error`; with the agent preloaded, a program reads only the families' points
// (faults/families.h), so a misspelt one is refused, and so is a function the program does not
// have. Without it (--no-preload) the program's own fault points (faultline::points) read the spec.
variant command_variant(const std::vector<std::string>& cmd, const command_flags& f, const std::string& faults,
                        std::optional<std::chrono::milliseconds> timeout, const std::vector<std::string>& env) {
  if (auto found = find_program(cmd[0]); !found) throw usage_error{"the command cannot be run: " + found.error().message()};
  const auto spec = *faults::parse(faults);  // checked by check_faults_flag
  std::string inlined;
  std::vector<std::string> notes;
  if (!f.no_preload) {
    check_agent_points(spec, spec_reader::program);
    inlined = check_program_points(spec, cmd, env, &notes);
  }
  variant v;
  v.notes = std::move(notes);
  v.name = fs::path(cmd[0]).filename().string();
  v.argv = cmd;
  v.faults = faults;
  v.timeout = timeout.value_or(default_run_timeout);
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
  // Where the functions the spec names were inlined (the DWARF's, read here so that the agent
  // never reads DWARF): the lock/ filters match there, fn/ points break there.
  if (!inlined.empty()) v.env.push_back(std::string(agent::detail::inlined_env) + "=" + inlined);
  return v;
}


}  // namespace faultline::harness::cli_detail
