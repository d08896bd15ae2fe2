#include "harness/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>

#include "faults/spec.h"
#include "harness/agent_dir.h"
#include "harness/campaign/soak.h"
#include "harness/cli_faults.h"
#include "harness/cli_shared.h"
#include "harness/cores_cli.h"
#include "harness/detail/sys.h"
#include "harness/region_cli.h"
#include "harness/version.h"
#include "harness/run/containment.h"
#include "reports/commands.h"

// The command: its subcommands' table and run_cli, and soak (the campaign subcommands are
// cli_campaign.cc's, what they share cli_shared.cc's).
namespace faultline::harness {
namespace {

using namespace cli_detail;

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
first {kept_passes} passes of its scenario or command (--keep), so a soak of a million passing runs stays small.
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
replays with the `faultline exec` line printed for it. --timeout (default {run_timeout}), --faults,
--no-preload, --slots and --late-cuda are a command's, as for exec.
Between runs the soak checks for processes, shared memory and
descriptors of the harness itself that the runs left behind. OUT/soak.json (the runs and failures
recorded so far) is rewritten as runs end, at most once a second, and with OUT/report.html /
OUT/report.md every --report-every while it runs; OUT/results.jsonl has one line per
run and, as with `run`, only failing runs (and the first {kept_passes} passes of each scenario or command) keep files.
Kill it at any moment and `--resume` continues with the rest of the budget: no finished run is
lost and none is counted twice. A soak or campaign already in --out is refused unless --resume
continues it or --replace starts a new soak there. A write that fails (a full disk) stops the soak with everything
recorded so far intact. Shards as `run` does (--shard, or the scheduler's variables).
Exit status: 0 no run failed and the harness leaked nothing, 1 otherwise, 2 for usage or output
errors, 130 when interrupted (resume it).)";

struct soak_args {
  std::vector<std::string> names;
  std::optional<std::vector<std::string>> command;  // the words after `--` (run_cli splits them off)
  std::string budget, out = default_soak_out_dir, seed, shard, report_every = format_duration(default_report_every),
                      keep = "failures", stacks = "auto", crash = "auto", grace = format_duration(default_grace), timeout,
                      faults;
  std::uint64_t jobs = default_jobs;
  std::string log_limit = size_text(default_log_limit_bytes);
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


CLI::App* add_soak_command(CLI::App& app, soak_args& a) {
  auto* soak = app.add_subcommand(
      "soak", "soak scenarios or a command for a time budget: faultline soak [SCENARIO...] --budget DUR [OPTIONS] [-- CMD [ARGS...]]");
  soak->footer(with_defaults(soak_about));
  soak->add_option("scenario", a.names, "scenario names or patterns (default: all; none with -- CMD)");
  soak->add_option("--budget", a.budget, "time to spend, across resumes, e.g. 8h, 30m")->required();
  soak->add_option("--out,-o", a.out, with_defaults("output directory (default {soak_out})"));
  add_out_choice(soak, a.resume, a.replace, "soak");
  soak->add_option("--jobs,-j", a.jobs, with_defaults("runs at once (default {jobs}; at most {max_jobs})"))->check(positive_count);
  soak->add_option("--seed", a.seed, "the soak's seed (default: from the clock, printed; a resume keeps its own)");
  soak->add_option("--shard", a.shard, "perform only shard i of n (i/n): the runs k with k mod n == i");
  soak->add_option("--report-every", a.report_every,
                   with_defaults("how often OUT/report.html, OUT/report.md and OUT/soak.json are rewritten (default {report_every})"));
  soak->add_option("--timeout-scale", a.timeout_scale, "multiply every scenario's timeout (a slow machine, a sanitizer build)");
  soak->add_option("--keep", a.keep, "whose files stay: failures (default), all, none");
  soak->add_option("--stacks", a.stacks, "stack capture of hung runs: auto, gdb, eu-stack, libdwfl, agent, proc, none");
  soak->add_flag("--no-stacks", a.no_stacks, "do not capture stacks of hung runs");
  soak->add_option("--crash-capture", a.crash, "as for run: auto (default), core, none, outside, minimal, inside");
  soak->add_option("--grace", a.grace, with_defaults("time between SIGTERM and SIGKILL when ending a run (default {grace})"));
  add_log_limit(soak, a.log_limit);
  soak->add_option("--env", a.env, "set K=V in every run's environment (repeatable)")->allow_extra_args(false);
  soak->add_flag("--json", a.json, "print one JSON summary object per scenario (or the command) to stdout");
  // A command soak's runs, as exec's (one definition each).
  add_timeout_option(soak, a.timeout);
  add_faults_option(soak, a.faults);
  add_command_flags(soak, a.run_flags);
  return soak;
}

struct region_args {
  std::string path;
  bool repair = false, json = false;
};

CLI::App* add_region_command(CLI::App& app, region_args& a) {
  auto* region = app.add_subcommand("region", "inspect (and --repair) a shared accounting region: faultline region PATH");
  region->add_option("path", a.path, "the region file (e.g. /dev/shm/faultline-accounting)")->required();
  region->add_flag("--repair", a.repair,
                   "reclaim dead processes' slots, repair slots left mid-update, recompute the aggregates (takes the lock)");
  region->add_flag("--json", a.json, "print the report as one JSON object");
  return region;
}

CLI::App* add_report_command(CLI::App& app, reports::report_options& o) {
  auto* report = app.add_subcommand("report", "write JUnit XML, Markdown and HTML reports: faultline report DIR... [--junit F] [--html F] [--markdown F]");
  report->footer(reports::report_help);
  report->add_option("dir", o.inputs, "campaign output directories, results.jsonl files, or directories of shard outputs")
      ->required();
  report->add_option("--junit", o.junit, "write JUnit XML to FILE");
  report->add_option("--html", o.html, "write the self-contained HTML report with plots to FILE");
  report->add_option("--markdown", o.markdown, "write the Markdown summary to FILE ('-': stdout)");
  report->add_option("--plotly-js", o.plotly_js, "plotly.js to embed in the HTML (default: $FAULTLINE_PLOTLY_JS, else python3-plotly's)");
  report->add_option("--title", o.title, "title of the HTML report (default 'faultline report')");
  return report;
}

CLI::App* add_gate_command(CLI::App& app, reports::gate_options& o) {
  auto* gate = app.add_subcommand("gate", "fail on a significant regression against a baseline: faultline gate --baseline F --current DIR");
  gate->footer(reports::gate_help);
  gate->add_option("--baseline", o.baseline, "the baseline to compare with (written by --write-baseline)");
  gate->add_option("--write-baseline", o.write_baseline, "write the baseline of the --current results to FILE instead");
  gate->add_option("--current", o.current, "the results to judge: as faultline report's DIR (repeatable)")->required();
  gate->add_option("--alpha", o.alpha, "significance level of each variant's one-sided Fisher exact test (default 0.01)");
  return gate;
}

// agent-env's --faults is refused exactly where exec's is (resolve()), and sets what exec's
// does (cmd_exec: cuda/cuda... points make the agent the CUDA injection library).
core::result<spec_facts> check_agent_env_faults(const std::string& text) {
  auto parsed = faults::parse(text);
  if (!parsed) return core::status(core::errc::invalid_argument, "--faults: " + parsed.error().message());
  try {
    check_agent_points(*parsed, spec_reader::program);
  } catch (const usage_error& e) {
    return core::status(core::errc::invalid_argument, e.message);
  }
  return spec_facts{names_cuda_runtime(*parsed), names_lock_points(*parsed), names_posix_points(*parsed)};
}

// What every subcommand's options are bound to while the command line is parsed and run.
struct cli_options {
  bool list_json = false;
  raw_args run, verify;
  exec_args exec;
  soak_args soak;
  shrink_args shrink;
  bisect_args bisect;
  region_args region;
  reports::report_options report;
  reports::gate_options gate;
  cores_options cores;
  agent_env_options agent_env;
  agent_report_options agent_report;
};

// One subcommand: `add` adds it to the app (its name, its about text and its options, bound to
// cli_options) and returns it; `run` performs it once parsed.
struct subcommand {
  std::function<CLI::App*(CLI::App&)> add;
  std::function<int(cli_context&)> run;
  /// Where the words after its first `--` go, split off before parsing (soak's command: CLI11
  /// would give them to the scenario names); null: CLI11 parses them (exec's positional).
  std::optional<std::vector<std::string>>* command_after_dashes = nullptr;
};

// The subcommands, in the order --help lists them: each named once, by its add function (the
// agent's and cores' in their own rooms: agent_dir.h, cores_cli.h).
std::vector<subcommand> subcommands(cli_options& o) {
  return {
      {[&o](CLI::App& app) { return add_list_command(app, o.list_json); },
       [&o](cli_context& ctx) { return cmd_list(o.list_json, ctx); }},
      {[&o](CLI::App& app) { return add_run_command(app, o.run); }, [&o](cli_context& ctx) { return cmd_run(o.run, ctx); }},
      {[&o](CLI::App& app) { return add_exec_command(app, o.exec); }, [&o](cli_context& ctx) { return cmd_exec(o.exec, ctx); }},
      {[&o](CLI::App& app) { return add_verify_command(app, o.verify); },
       [&o](cli_context& ctx) { return cmd_verify(o.verify, ctx); }},
      {[&o](CLI::App& app) { return add_soak_command(app, o.soak); }, [&o](cli_context& ctx) { return cmd_soak(o.soak, ctx); },
       &o.soak.command},
      {[&o](CLI::App& app) { return add_shrink_command(app, o.shrink); },
       [&o](cli_context& ctx) { return cmd_shrink(o.shrink, ctx); }},
      {[&o](CLI::App& app) { return add_bisect_command(app, o.bisect); },
       [&o](cli_context& ctx) { return cmd_bisect(o.bisect, ctx); }},
      {[&o](CLI::App& app) { return add_region_command(app, o.region); },
       [&o](cli_context& ctx) { return region_command(o.region.path, o.region.repair, o.region.json, ctx.out, ctx.err); }},
      {[&o](CLI::App& app) { return add_report_command(app, o.report); },
       [&o](cli_context& ctx) { return reports::report_command(o.report, ctx.out, ctx.err); }},
      {[&o](CLI::App& app) { return add_gate_command(app, o.gate); },
       [&o](cli_context& ctx) { return reports::gate_command(o.gate, ctx.out, ctx.err); }},
      {[&o](CLI::App& app) { return add_cores_command(app, o.cores); },
       [&o](cli_context& ctx) { return cores_command(o.cores, ctx.out, ctx.err); }},
      // agent-env / agent-report (agent_dir.h): the agent for processes faultline does not start.
      {[&o](CLI::App& app) { return add_agent_env_command(app, o.agent_env); },
       [&o](cli_context& ctx) { return agent_env_command(o.agent_env, check_agent_env_faults, ctx.out, ctx.err); }},
      {[&o](CLI::App& app) { return add_agent_report_command(app, o.agent_report); },
       [&o](cli_context& ctx) { return agent_report_command(o.agent_report, ctx.out, ctx.err); }},
  };
}

// CLI11 reports a misspelt subcommand as a missing one; this names it instead. Returns whether
// args[1] names a subcommand, or is an option, or is absent.
bool known_subcommand(const std::vector<std::string>& args, const std::vector<CLI::App*>& subs, cli_context& ctx) {
  if (args.size() < 2 || args[1].empty() || args[1][0] == '-') return true;
  std::string expected;
  for (std::size_t i = 0; i < subs.size(); ++i) {
    if (subs[i]->get_name() == args[1]) return true;
    expected += (i == 0 ? "" : i + 1 == subs.size() ? " or " : ", ") + subs[i]->get_name();
  }
  ctx.err << "faultline: error: unknown subcommand '" << args[1] << "' (expected " << expected << ")\n"
          << "Run 'faultline --help' for usage.\n";
  return false;
}

// The command line without the words after the first `--` of a subcommand that takes them
// itself (soak's command), which go to it.
std::vector<std::string> split_off_command(const std::vector<std::string>& args, const std::vector<subcommand>& table,
                                           const std::vector<CLI::App*>& subs) {
  std::vector<std::string> rest = args;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (args.size() < 2 || args[1] != subs[i]->get_name() || !table[i].command_after_dashes) continue;
    if (auto mark = std::find(rest.begin() + 2, rest.end(), "--"); mark != rest.end()) {
      table[i].command_after_dashes->emplace(mark + 1, rest.end());
      rest.erase(mark, rest.end());
    }
  }
  return rest;
}

// Parses `args`; returns the exit status when that is all there is to do (help, version, a
// parse error), else nullopt.
std::optional<int> parse_command_line(CLI::App& app, const std::vector<std::string>& args, cli_context& ctx) {
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
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
  return std::nullopt;
}

}  // namespace

int run_cli(const std::vector<std::string>& args, cli_context& ctx) {
  CLI::App app{with_defaults(about), "faultline"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  app.set_version_flag("--version", version_line(), "print the version and the commit faultline was built from");
  cli_options options;
  const std::vector<subcommand> table = subcommands(options);
  std::vector<CLI::App*> subs;
  for (const auto& c : table) subs.push_back(c.add(app));

  if (!known_subcommand(args, subs, ctx)) return exit_usage;
  if (auto status = parse_command_line(app, split_off_command(args, table, subs), ctx)) return *status;
  try {
    for (std::size_t i = 0; i < table.size(); ++i)
      if (subs[i]->parsed()) return table[i].run(ctx);
  } catch (const usage_error& e) {
    ctx.err << "faultline: error: " << e.message << "\nRun 'faultline --help' for usage.\n";
    return exit_usage;
  }
  return exit_usage;
}

}  // namespace faultline::harness
