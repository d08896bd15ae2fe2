#include <algorithm>
#include <cstdlib>

#include "harness/agent_dir.h"
#include "harness/cli_shared.h"
#include "harness/detail/sys.h"

// list, run, exec and verify: the subcommands that are one campaign of runs (cli_shared.h).
namespace faultline::harness::cli_detail {
namespace {

constexpr const char* run_about = R"(Run scenarios from the scenario binary (faultline-scenarios beside faultline, or
$FAULTLINE_SCENARIOS). SCENARIO may be a shell pattern ("exit/*"). Each scenario's own timeout is
the default per-run timeout.)";

constexpr const char* exec_about = R"(Run a command repeatedly:  faultline exec [OPTIONS] -- CMD [ARGS...]
The command must exist and be executable (searched in PATH without a '/'), else nothing runs
(exit status 2). The in-process agent (BUILD/lib/libfaultline_agent.so, beside the faultline
binary) is preloaded so that exit-time failures are told from work-time ones and the agent's fault
points work; it installs no crash handler by default (crash stacks come from core dumps, see
--crash-capture); gtest programs are asked for an XML report. Default per-run timeout: {run_timeout}.
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
kill, print, stop), found in the symbol tables: fn/lock_shrreg=kill. nccl/<API> stands before an
NCCL call (nccl/ncclAllReduce, nccl/ncclCommInitRank...: off, delay, abort, kill, print, stop and
fail(ncclResult_t name or N)), with an optional @rank=N filter (nccl/ncclAllReduce@rank=1=2*off->stop);
each rank's NCCL calls are counted, so that a hang names the ranks in the collective and those
outside it. stop: the process stops (SIGSTOP) until continued or killed.)";

constexpr const char* verify_about = R"(Check that every scenario's clean variant never fails and that each of its bug points is
detected (any outcome but pass) at least at the scenario's required rate. Prints a table; exit
status 0 only when every row is OK.)";


// verify's checks: one row per variant (a scenario's clean variant, then each bug point's).
struct verify_row {
  std::string scenario, variant_label;
  bool clean;
  double required;
};

// What verify runs, a variant per row.
struct verify_plan {
  std::vector<variant> variants;
  std::vector<verify_row> rows;
};

verify_plan plan_verify(const std::vector<scenario_info>& chosen, const settings& s) {
  verify_plan plan;
  for (const auto& sc : chosen) {
    auto timeout = s.timeout.value_or(sc.timeout);
    const auto replay = replay_options(s.timeout, s.user_env, s.crash, false, false);
    plan.variants.push_back(scenario_variant(sc, sc.name, "", timeout));
    plan.variants.back().replay = replay;
    plan.rows.push_back({sc.name, "clean", true, 0.0});
    for (const auto& b : sc.bug_points) {
      plan.variants.push_back(scenario_variant(sc, sc.name + "@" + b.point, b.faults, timeout));
      plan.variants.back().replay = replay;
      plan.rows.push_back({sc.name, b.point, false, b.detect_rate});
    }
  }
  return plan;
}

// A row's verdict: a clean variant never fails; a bug point is detected (any outcome but pass,
// an error detecting nothing) at least at the required rate.
struct verify_check {
  std::uint64_t hits = 0;  // failures (clean) or detections (bug point)
  double rate = 0;
  bool ok = false;
};

verify_check judge(const verify_row& rw, const variant_summary& v) {
  const std::uint64_t errors = v.outcomes.at(outcome::error);
  verify_check c;
  c.hits = rw.clean ? v.failures : v.failures - errors;  // errors detect nothing
  c.rate = v.runs ? static_cast<double>(c.hits) / static_cast<double>(v.runs) : 0.0;
  c.ok = v.runs == 0 || (rw.clean ? c.hits == 0 : (errors == 0 && c.rate >= rw.required));
  return c;
}

// The replay of a row: a clean variant's first failure; a bug variant's first run that did not
// detect it, or its first run.
std::string verify_repro(const verify_row& rw, const variant_summary& v) {
  const auto& pick = rw.clean ? v.first_failure : (v.first_pass ? v.first_pass : v.first_record);
  if (!pick || (!rw.clean && !v.runs)) return "";
  return "faultline run " + detail::shell_quote(rw.scenario) + repro_flags(*pick);
}

nlohmann::json verify_json(const verify_row& rw, const variant& var, const variant_summary& v, const verify_check& c,
                           const settings& s) {
  auto j = summary_json(v, s, verify_repro(rw, v));
  j["scenario"] = rw.scenario;
  j["variant"] = rw.variant_label;
  j["faults"] = var.faults;
  j["check"] = rw.clean ? "no-failures" : "detected";
  j[rw.clean ? "failures" : "detections"] = c.hits;
  j["rate"] = c.rate;
  j["required_rate"] = rw.required;
  j["ok"] = c.ok;
  return j;
}

// Prints the table in aligned columns, its last column (OK/FAIL) coloured.
void print_table(const std::vector<std::vector<std::string>>& table, const painter& paint, std::ostream& out) {
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
    out << text << "\n";
  }
}

}  // namespace

CLI::App* add_list_command(CLI::App& app, bool& json) {
  auto* list = app.add_subcommand("list", "list the scenarios of the scenario binary");
  list->add_flag("--json", json, "print the catalog as a JSON array");
  return list;
}

CLI::App* add_run_command(CLI::App& app, raw_args& a) {
  auto* run = app.add_subcommand("run", "run scenarios: faultline run SCENARIO... | --all [OPTIONS]");
  run->footer(run_about);
  run->add_option("scenario", a.names, "scenario names or patterns");
  run->add_flag("--all", a.all, "run every scenario");
  add_common(run, a, true);
  run->add_flag("--late-cuda", a.late_cuda,
                "fail a run whose processes make CUDA calls after the runtime's teardown (see exec --late-cuda): the "
                "agent's library is preloaded into the scenario binary (which links the agent) and becomes its CUDA "
                "injection library");
  return run;
}

CLI::App* add_exec_command(CLI::App& app, exec_args& a) {
  auto* exec = app.add_subcommand("exec", "run a command: faultline exec [OPTIONS] -- CMD [ARGS...]");
  exec->footer(with_defaults(exec_about));
  add_common(exec, a.common, true);
  add_command_flags(exec, a.flags);
  exec->add_option("command", a.command, "the command and its arguments, after --");
  return exec;
}

CLI::App* add_verify_command(CLI::App& app, raw_args& a) {
  auto* verify = app.add_subcommand("verify", "check that clean variants pass and bug points are detected");
  verify->footer(verify_about);
  verify->add_option("scenario", a.names, "scenario names or patterns (default: all)");
  add_common(verify, a, false);
  return verify;
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
  settings s = resolve(a, default_repeat);
  adopt_resumed_options(s);
  auto chosen = catalog_for(a.names, a.all);
  if (!chosen) throw usage_error{chosen.error().message()};
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
  for (const auto& sc : *chosen) {
    variants.push_back(scenario_variant(sc, sc.name, s.faults, s.timeout.value_or(sc.timeout), env));
    variants.back().replay = replay_options(s.timeout, s.user_env, s.crash, false, a.late_cuda);
  }
  return report_runs(variants, s, ctx, [&](const run_record& r) {
    return "faultline run " + detail::shell_quote(r.name) + repro_flags(r);
  });
}

int cmd_exec(const exec_args& a, cli_context& ctx) {
  std::vector<std::string> cmd = a.command;
  if (!cmd.empty() && cmd.front() == "--") cmd.erase(cmd.begin());
  if (cmd.empty()) throw usage_error{"no command: faultline exec [OPTIONS] -- CMD [ARGS...]"};
  settings s = resolve(a.common, default_repeat);
  variant v = command_variant(cmd, a.flags, s.faults, s.timeout, s.env);
  v.replay = replay_options(s.timeout, s.user_env, s.crash, a.flags.no_preload, a.flags.late_cuda);
  adopt_resumed_options(s);
  return report_runs({v}, s, ctx, [](const run_record& r) { return exec_repro(r); });
}

int cmd_verify(const raw_args& a, cli_context& ctx) {
  settings s = resolve(a, default_verify_repeat);
  adopt_resumed_options(s);
  auto chosen = catalog_for(a.names, a.names.empty());
  if (!chosen) throw usage_error{chosen.error().message()};
  const verify_plan plan = plan_verify(*chosen, s);
  auto r = perform(plan.variants, s, ctx);
  if (!r) return exit_usage;
  const auto& sums = r->summaries;
  bool all_ok = r->stray_pids.empty() && r->stray_shm.empty();
  std::vector<std::vector<std::string>> table = {{"scenario", "variant", "runs", "failures/detections", "rate", "required", "result"}};
  for (std::size_t i = 0; i < plan.rows.size(); ++i) {
    const auto& v = sums[i];
    const auto& rw = plan.rows[i];
    const verify_check c = judge(rw, v);
    all_ok = all_ok && c.ok;
    if (s.json) {
      auto j = verify_json(rw, plan.variants[i], v, c, s);
      mark_interrupted(j, *r);
      ctx.out << j.dump() << "\n";
    }
    table.push_back({rw.scenario, rw.variant_label, std::to_string(v.runs), std::to_string(c.hits), v.runs ? percent(c.rate) : "-",
                     rw.clean ? "= 0" : ">= " + percent(rw.required), c.ok ? "OK" : "FAIL"});
  }
  if (!s.json) {
    print_table(table, painter{ctx.out_tty && !std::getenv("NO_COLOR")}, ctx.out);
    for (std::size_t i = 0; i < plan.rows.size(); ++i)
      if (sums[i].points_never_reached && !sums[i].points_never_reached->empty())
        ctx.out << plan.rows[i].scenario << " " << plan.rows[i].variant_label << ": " << points_warning(*sums[i].points_never_reached) << "\n";
    // An interrupted verify judged fewer runs than it was made of: no "all checks hold".
    if (r->interrupted) ctx.out << "verify: " << interrupted_line(*r) << (all_ok ? "" : " (some checks FAILED already)") << "\n";
    else ctx.out << (all_ok ? "verify: all checks hold\n" : "verify: some checks FAILED\n");
  }
  ctx.out.flush();
  if (r->interrupted) return exit_interrupted;
  return all_ok ? exit_ok : exit_failed;
}

}  // namespace faultline::harness::cli_detail
