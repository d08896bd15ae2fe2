#include <cstdlib>

#include "harness/cli_shared.h"
#include "harness/detail/sys.h"
#include "harness/results/counted.h"
#include "harness/triage/bisect.h"
#include "harness/triage/shrink.h"

// shrink and bisect: from a failure to its cause (harness/triage/).
namespace faultline::harness::cli_detail {
namespace {

constexpr const char* shrink_about = R"(Shrink a failing run's fault spec:  faultline shrink OUT RUN [OPTIONS]
RUN is a run id as OUT/results.jsonl names it (the summary's "first:" line, e.g. my_test.s42). The
run is replayed with its seed and spec ({confirm} runs from its seed measure the rate r0 of the
same failure: same outcome, phase and signature), then items are removed, terms removed, counts,
probabilities and delays halved, each change kept while the failure still reproduces. A
candidate runs with seeds S, S+1, ... (S: the run's); with n the runs without the failure that
bound its rate below {gone} x r0 at 95% (n = runs_to_claim(0, {gone} x r0)) and k = ceil({gone} x
r0 x n), it is kept as soon as k of its runs show the failure and gone as soon as the rest of its
n runs could no longer bring k, so a flaky failure shrinks too. The minimal spec is then run
{confirm} times again and its rate printed with its 95% interval, with the runs spent and a repro line. Works for
`faultline run` and `faultline exec` runs (give exec's --no-preload or --late-cuda again where the
campaign had them, and --crash-capture where it was not auto: signatures depend on it). The
steps go to OUT/shrink/RUN/shrink.json (or --to DIR) and its runs to DIR/samples; nothing else in
OUT changes. Budgets: --max-runs, --budget; Ctrl-C stops it and prints the best spec so far.
Exit status: 0 shrunk (or the budget ran out: the spec printed is the smallest found), 1 the
failure did not reproduce, 2 usage errors, 130 interrupted.)";

constexpr const char* bisect_about = R"(Find the commit that raised a failure rate:
  faultline bisect --good REV --bad REV [--build CMD] [OPTIONS] -- COMMAND [ARGS...]
Run in a git checkout. Each commit tested is checked out into a worktree of its own (git worktree
add --detach, in a temporary folder outside the checkout, removed after), built there with --build
(run by /bin/sh in the worktree; a commit whose build fails is skipped), COMMAND's program is
checked there as `faultline exec` checks it (a relative path in the worktree: without --build, a
worktree holds only what its commit tracks; a program missing at --good or --bad is refused before
any run, at a commit between them skips it), and COMMAND is run there as `faultline exec` runs it,
with seeds S, S+1, ... at every commit. A run counts when it fails
(any outcome but pass), or with --signature when its signature contains TEXT. The good and bad
revisions are run --runs times each and must differ (the gate's one-sided Fisher exact test at
--alpha). A commit between them is run in batches of --batch, with a look after each, until it is
like bad (its rate greater than good's) or like good (bad's greater than its) at --alpha divided
by the number of looks (so each decision errs with probability at most --alpha), or --runs are
spent: undecided. Skipped and undecided commits are passed over; the first bad commit is then
named as one of a range. Prints each step's rate and runs and the first bad commit; writes
OUT/bisect.json (the table `faultline report` shows); OUT must be a folder of its own (one holding
a campaign, a soak or an earlier bisect is refused). The working tree is never touched.
Exit status: 0 the first bad commit was found, 1 it could not be decided (or the endpoints do not
differ), 2 usage errors, 130 interrupted.)";

std::string triage_text(const char* text) {
  std::string s = with_defaults(text);
  for (const auto& [token, value] : {std::pair<std::string, std::string>{"{confirm}", std::to_string(default_shrink_confirm_runs)},
                                     {"{gone}", std::to_string(default_shrink_gone_fraction).substr(0, 3)}})
    for (auto at = s.find(token); at != std::string::npos; at = s.find(token)) s.replace(at, token.size(), value);
  return s;
}

// The options a shrink or a bisect runs with, as a campaign's.
campaign_options triage_settings(const triage_args& a, cli_context& ctx) {
  campaign_options o;
  auto g = parse_duration(a.grace);
  if (!g) throw usage_error{"--grace: " + g.error().message()};
  o.grace = *g;
  auto crash = crash_capture_from_string(a.crash);
  if (!crash) throw usage_error{"--crash-capture '" + a.crash + "': expected auto, core, none, outside, minimal or inside"};
  o.crash = *crash;
  o.env = run_environment(a.env, scheduled_shard{});
  o.cancel = ctx.cancel;
  o.keep = keep_policy::failures;
  o.warn = [&ctx](const std::string& text) { ctx.err << "faultline: warning: " << text << "\n"; };
  return o;
}

// The recorded run RUN of OUT; throws usage_error when there is none, or it passed.
run_record find_run(const std::string& out, const std::string& id) {
  auto recorded = read_results(fs::path(out) / "results.jsonl");
  if (!recorded) throw usage_error{"OUT '" + out + "': " + recorded.error().message()};
  for (auto& r : recorded->records) {
    if (r.run_id != id) continue;
    if (r.result == outcome::pass) throw usage_error{"run " + id + " passed: there is no failure to shrink"};
    return std::move(r);
  }
  throw usage_error{"no run '" + id + "' in " + (fs::path(out) / "results.jsonl").string() +
                    " (a run id as its records name it, e.g. the summary's first: line)"};
}

// A catalog run's variant (the scenario binary's `run NAME`), else a command's as exec builds it.
std::pair<variant, bool> variant_of(const run_record& r, const triage_args& a, const campaign_options& o) {
  const auto timeout = parse_timeout(a.timeout);
  if (identity_of(r).kind == variant_kind::scenario && r.command.size() == 3 && r.command[2] == r.name) {
    auto sc = catalog_for({r.name}, false);
    if (sc && sc->size() == 1) return {scenario_variant(sc->front(), r.name, r.faults, timeout.value_or(sc->front().timeout)), true};
  }
  if (r.command.empty()) throw usage_error{"run " + r.run_id + " records no command"};
  variant v = command_variant(r.command, a.flags, r.faults, timeout, o.env);
  v.name = r.name;
  return {v, false};
}

void print_shrink(const shrink_result& s, const run_record& r, const std::string& repro, const fs::path& dir, std::ostream& out) {
  out << "shrink of " << r.run_id << " (" << to_string(r.result) << (r.when == phase::none ? "" : "/" + std::string(to_string(r.when)))
      << "  " << r.signature << ")\n";
  out << "  original: " << (s.original.empty() ? "(none)" : s.original) << "  (the failure in " << s.original_hits << " of "
      << counted(s.original_runs, "run") << ")\n";
  if (!s.reproduced) {
    out << "  the failure did not reproduce in " << counted(s.original_runs, "run") << " from seed " << r.seed << "\n";
    return;
  }
  out << "  minimal:  " << (s.minimal.empty() ? "(none: it fails without faults)" : s.minimal) << "\n";
  if (s.confirm_runs)
    out << "  rate: " << percent(s.rate.rate) << " (95% CI " << percent(s.rate.lower95) << " - " << percent(s.rate.upper95)
        << ") in " << counted(s.confirm_runs, "run") << "\n";
  else out << "  rate: not measured (" << s.stopped << ")\n";
  out << "  runs spent: " << s.runs_spent << " (" << counted(s.steps.size(), "candidate") << ", up to "
      << counted(s.runs_per_candidate, "run") << " each)" << (s.stopped == "done" ? "" : "; stopped: " + s.stopped) << "\n";
  out << "  steps: " << (dir / "shrink.json").string() << "\n";
  out << "  repro: " << repro << "\n";
}

}  // namespace

void add_triage_options(CLI::App* sub, triage_args& a) {
  add_timeout_option(sub, a.timeout);
  sub->add_option("--crash-capture", a.crash, "as for run: auto (default), core, none, outside, minimal, inside");
  sub->add_option("--grace", a.grace, with_defaults("time between SIGTERM and SIGKILL when ending a run (default {grace})"));
  sub->add_option("--env", a.env, "set K=V in every run's environment (repeatable)")->allow_extra_args(false);
  add_command_flags(sub, a.flags);
}

CLI::App* add_shrink_command(CLI::App& app, shrink_args& a) {
  auto* sub = app.add_subcommand("shrink", "shrink a failing run's fault spec: faultline shrink OUT RUN [OPTIONS]");
  sub->footer(triage_text(shrink_about));
  sub->add_option("out", a.out, "the campaign's output directory")->required();
  sub->add_option("run", a.run, "the run id, as OUT/results.jsonl names it")->required();
  sub->add_option("--to", a.to, "where the steps and runs go (default OUT/shrink/RUN)");
  sub->add_option("--confirm", a.confirm, triage_text("runs that measure the original and the minimal spec's rates (default {confirm})"))
      ->check(positive_count);
  sub->add_option("--max-runs", a.max_runs, "budget in runs (default " + std::to_string(default_shrink_max_runs) + ")")
      ->check(positive_count);
  sub->add_option("--budget", a.budget, "budget in time, e.g. 10m (default " + format_duration(default_shrink_budget) + ")");
  sub->add_flag("--json", a.json, "print shrink.json's object to stdout");
  add_triage_options(sub, a.common);
  return sub;
}

int cmd_shrink(const shrink_args& a, cli_context& ctx) {
  shrink_options o;
  o.run_settings = triage_settings(a.common, ctx);
  if (!a.budget.empty()) {
    auto b = parse_duration(a.budget);
    if (!b || b->count() <= 0) throw usage_error{"--budget '" + a.budget + "': expected a positive duration such as 10m"};
    o.budget = *b;
  }
  o.target = find_run(a.out, a.run);
  check_faults_flag(o.target.faults);
  const auto [v, catalog] = variant_of(o.target, a.common, o.run_settings);
  o.base = v;
  o.faults = o.target.faults;
  o.seed = o.target.seed;
  o.confirm_runs = a.confirm;
  o.max_runs = a.max_runs;
  o.work_dir = a.to.empty() ? fs::path(a.out) / "shrink" / a.run : fs::path(a.to);
  o.on_step = [&ctx](const shrink_step& s) {
    ctx.err << "faultline: shrink: " << s.change << ": " << (s.reproduced ? "reproduced" : "gone") << " (the failure in " << s.hits << " of "
            << counted(s.runs, "run") << ")\n";
  };
  ctx.err << "faultline: shrinking " << o.target.run_id << " (seed " << o.seed << "): " << o.faults << "\n";
  auto r = run_shrink(o);
  if (!r) {
    ctx.err << "faultline: error: " << r.error().message() << "\n";
    return exit_usage;
  }
  run_record best = o.target;
  best.seed = r->repro_seed;
  best.faults = r->minimal;
  // What the shrink's runs had (its own options, which the user gives as the campaign had them).
  best.replay = replay_options(parse_timeout(a.common.timeout), a.common.env, o.run_settings.crash, !catalog && a.common.flags.no_preload,
                               !catalog && a.common.flags.late_cuda);
  const std::string repro = catalog ? "faultline run " + detail::shell_quote(best.name) + repro_flags(best) : exec_repro(best);
  if (a.json) ctx.out << nlohmann::json(to_record(*r, o.target)).dump() << "\n";
  else print_shrink(*r, o.target, repro, o.work_dir, ctx.out);
  ctx.out.flush();
  if (r->stopped == "interrupted") return exit_interrupted;
  return r->reproduced ? exit_ok : exit_failed;
}

CLI::App* add_bisect_command(CLI::App& app, bisect_args& a) {
  auto* sub = app.add_subcommand("bisect",
                                 "find the commit that raised a failure rate: faultline bisect --good REV --bad REV [--build CMD] -- COMMAND");
  sub->footer(bisect_about);
  sub->add_option("--good", a.good, "a revision whose rate is the good one")->required();
  sub->add_option("--bad", a.bad, "a later revision whose rate is the bad one")->required();
  sub->add_option("--build", a.build, "shell command that builds a commit in its worktree (a failure skips the commit)");
  sub->add_option("--runs", a.runs, "runs at most per commit; the good and bad revisions get all of them (default " +
                                        std::to_string(default_bisect_runs) + ")")
      ->check(positive_count);
  sub->add_option("--batch", a.batch, "runs between two looks at a commit's rate (default " + std::to_string(default_bisect_batch) + ")")
      ->check(positive_count);
  sub->add_option("--alpha", a.alpha, "error bound of each decision: the one-sided test's level, split over the looks (default 0.01)");
  sub->add_option("--signature", a.signature, "count only failures whose signature contains TEXT");
  sub->add_option("--seed", a.seed, "base seed S: the runs at every commit get S, S+1, ... (default: from the clock, printed)");
  sub->add_option("--repo,-C", a.repo, "the git checkout (default: the working directory)");
  sub->add_option("--out,-o", a.out, std::string("where bisect.json and the runs go (default ") + default_bisect_out_dir + ")");
  add_triage_options(sub, a.common);
  sub->add_option("command", a.command, "the command and its arguments, after --");
  return sub;
}

namespace {

std::string short_commit(const std::string& c) { return c.substr(0, 12); }

void print_bisect(const bisect_result& r, std::ostream& out) {
  std::vector<std::vector<std::string>> table = {{"commit", "role", "verdict", "runs", "failures", "rate", "p(like bad)", "p(like good)", "subject"}};
  auto p = [](double v, const bisect_step& s) {
    if (s.role != "step" || s.verdict == "skip") return std::string("-");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return std::string(buf);
  };
  for (const auto& s : r.steps)
    table.push_back({short_commit(s.commit), s.role, s.verdict, std::to_string(s.runs), std::to_string(s.failures),
                     s.runs ? percent(static_cast<double>(s.failures) / static_cast<double>(s.runs)) : "-", p(s.p_like_bad, s),
                     p(s.p_like_good, s), s.subject});
  std::vector<std::size_t> width(table[0].size(), 0);
  for (const auto& line : table)
    for (std::size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  for (const auto& line : table) {
    std::string text;
    for (std::size_t c = 0; c < line.size(); ++c) text += line[c] + (c + 1 == line.size() ? "" : std::string(width[c] - line[c].size() + 2, ' '));
    out << text << "\n";
  }
  for (const auto& s : r.steps)
    if (!s.why.empty()) out << short_commit(s.commit) << " " << s.verdict << ": " << s.why << "\n";
  if (!r.problem.empty()) out << "bisect: cannot bisect: " << r.problem << "\n";
  else if (r.first_bad) {
    std::string subject;
    for (const auto& s : r.steps)
      if (s.commit == *r.first_bad) subject = s.subject;
    out << "first bad commit: " << *r.first_bad << (subject.empty() ? "" : "  " + subject) << "\n";
  } else {
    out << "bisect: could not decide" << (r.interrupted ? " (interrupted)" : "") << ": the first bad commit is one of";
    for (const auto& c : r.undecided_range) out << " " << short_commit(c);
    out << "\n";
  }
}

}  // namespace

int cmd_bisect(const bisect_args& a, cli_context& ctx) {
  std::vector<std::string> cmd = a.command;
  if (!cmd.empty() && cmd.front() == "--") cmd.erase(cmd.begin());
  if (cmd.empty()) throw usage_error{"no command: faultline bisect --good REV --bad REV [--build CMD] -- COMMAND [ARGS...]"};
  if (!(a.alpha > 0 && a.alpha < 1)) throw usage_error{"--alpha must be between 0 and 1 (exclusive), e.g. 0.01"};
  if (a.batch > a.runs) throw usage_error{"--batch " + std::to_string(a.batch) + " is more than --runs " + std::to_string(a.runs)};
  bisect_options o;
  o.run_settings = triage_settings(a.common, ctx);
  o.good = a.good;
  o.bad = a.bad;
  o.repo = a.repo;
  if (auto revs = resolve_revisions(o.repo, a.good, a.bad); !revs) throw usage_error{revs.error().message()};
  // Checked again by run_bisect under the folder's lock; here, before the command is checked.
  if (auto held = find_recorded_campaign(a.out); held && held->any())
    throw usage_error{"--out " + a.out + " holds " + held->describe(a.out) + ": give the bisect a folder of its own"};
  o.build = a.build;
  o.program = cmd[0];
  o.out_dir = a.out;
  if (!a.signature.empty()) o.signature = a.signature;
  o.seed = a.seed.empty() ? static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                            std::chrono::system_clock::now().time_since_epoch()).count())
                          : std::strtoull(a.seed.c_str(), nullptr, 10);
  if (!a.seed.empty() && a.seed.find_first_not_of("0123456789") != std::string::npos)
    throw usage_error{"--seed '" + a.seed + "': expected a non-negative integer"};
  o.runs = a.runs;
  o.batch = a.batch;
  o.alpha = a.alpha;
  const auto timeout = parse_timeout(a.common.timeout);
  const std::string shown = fs::path(cmd[0]).filename().string();
  // The command runs in the worktree: a shell changes into it and execs the command (checked as
  // exec checks a command, once here, before anything runs).
  o.make_variant = [&, timeout](const fs::path& wt) {
    variant v = command_variant({"/bin/sh", "-c", "cd " + detail::shell_quote(wt.string()) + " && exec " + detail::shell_join(cmd)},
                                a.common.flags, "", timeout, o.run_settings.env);
    v.name = shown;
    return v;
  };
  (void)o.make_variant(fs::current_path());
  o.on_step = [&ctx](const bisect_step& s) {
    ctx.err << "faultline: bisect: " << short_commit(s.commit) << " (" << s.role << "): " << s.verdict << ", " << s.failures << "/"
            << counted(s.runs, "run") << " failed\n";
  };
  ctx.err << "faultline: bisect of `" << detail::shell_join(cmd) << "` between " << a.good << " and " << a.bad << ", seed " << o.seed
          << ", at most " << counted(o.runs, "run") << " a commit, alpha " << o.alpha << "\n";
  auto r = run_bisect(o);
  if (!r) {
    ctx.err << "faultline: error: " << r.error().message() << "\n";
    return exit_usage;
  }
  print_bisect(*r, ctx.out);
  ctx.out.flush();
  if (r->interrupted) return exit_interrupted;
  return r->first_bad ? exit_ok : exit_failed;
}

}  // namespace faultline::harness::cli_detail
