// What the `faultline` command's files share (cli.cc: the subcommand table, run_cli and soak;
// cli_campaign.cc: list, run, exec and verify; cli_shared.cc: the options every campaign has,
// turning them into settings, performing a campaign and printing what it found). Private to the
// command: nothing outside harness/cli*.cc includes it.
//
// Every default a --help text names is printed from its one definition (harness/detail/defaults.h)
// through with_defaults(): "{grace}" in a text becomes "1s".
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/campaign/campaign.h"
#include "harness/campaign/duration.h"
#include "harness/campaign/scenario_catalog.h"
#include "harness/campaign/scenario_variant.h"
#include "harness/cli.h"
#include "harness/cli_faults.h"
#include "harness/detail/defaults.h"
#include "harness/results/shard.h"

namespace faultline::harness::cli_detail {

namespace fs = std::filesystem;

/// A --help text with the defaults it names filled in from harness/detail/defaults.h: {run_timeout},
/// {grace}, {log_limit}, {jobs}, {max_jobs}, {repeat}, {verify_repeat}, {until_fail_repeat},
/// {kept_passes}, {report_every}, {out}, {soak_out}.
std::string with_defaults(std::string text);

/// "4MiB" for 4 << 20 (KiB and MiB when exact, else bytes): how --log-limit reads a size.
std::string size_text(std::uint64_t bytes);

/// CLI11's PositiveNumber prints its range up to DBL_MAX; counts read better with a plain message.
extern const CLI::Validator positive_count;

/// The options every campaign (run, exec, verify) has, as given.
struct raw_args {
  std::uint64_t repeat = default_repeat;
  std::string timeout, grace = format_duration(default_grace), seed, out = default_campaign_out_dir, shard, faults,
                       stacks = "auto";
  std::uint64_t jobs = default_jobs;
  std::string log_limit = size_text(default_log_limit_bytes);
  std::string keep = "failures";
  std::string crash = "auto";
  std::string schedule = "declared";
  bool json = false, until_fail = false, no_stacks = false, all = false, resume = false, replace = false, late_cuda = false;
  std::vector<std::string> env, names;
  double target_rate = 0;
  CLI::Option* repeat_opt = nullptr;
  CLI::Option* target_opt = nullptr;
};

/// A campaign's options once checked (resolve).
struct settings {
  std::uint64_t repeat = default_repeat;
  std::optional<std::chrono::milliseconds> timeout;
  std::chrono::milliseconds grace{default_grace};
  std::uint64_t log_limit = default_log_limit_bytes;
  unsigned jobs = default_jobs;
  schedule_kind schedule = schedule_kind::slots;
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

/// How a user's command runs, beyond the options every campaign has: exec's and `soak -- CMD`'s.
struct command_flags {
  bool no_preload = false, late_cuda = false;
  std::uint64_t slots = 1;
};

/// Colours a summary's words on a terminal (unless NO_COLOR).
struct painter {
  bool on;
  std::string red(const std::string& s) const { return on ? "\033[31m" + s + "\033[0m" : s; }
  std::string green(const std::string& s) const { return on ? "\033[32m" + s + "\033[0m" : s; }
};

// Options, added to a subcommand.
void add_log_limit(CLI::App* sub, std::string& limit);
void add_out_choice(CLI::App* sub, bool& resume, bool& replace, const std::string& what);
void add_timeout_option(CLI::App* sub, std::string& timeout);
void add_faults_option(CLI::App* sub, std::string& faults);
void add_command_flags(CLI::App* sub, command_flags& f);
void add_common(CLI::App* sub, raw_args& a, bool with_faults);

// Options, checked; each throws usage_error naming the option.
std::uint64_t parse_log_limit(const std::string& text);
scheduled_shard shard_for(const std::string& flag);
std::vector<std::string> run_environment(const std::vector<std::string>& user_env, const scheduled_shard& sh);
std::optional<std::chrono::milliseconds> parse_timeout(const std::string& text);
void check_faults_flag(const std::string& text);
settings resolve(const raw_args& a, std::uint64_t repeat_default);
void adopt_resumed_options(settings& s);

// Performing a campaign.
std::string shard_header(const scheduled_shard& sh);
void acknowledge_sharding();
std::optional<out_dir_lock> hold_out_dir(const fs::path& out, bool resume, bool replace, cli_context& ctx);
std::optional<campaign_result> perform(const std::vector<variant>& variants, settings& s, cli_context& ctx);
core::result<std::vector<scenario_info>> catalog_for(const std::vector<std::string>& names, bool all);
variant command_variant(const std::vector<std::string>& cmd, const command_flags& f, const std::string& faults,
                        std::optional<std::chrono::milliseconds> timeout, const std::vector<std::string>& env);

// Printing what it found.
std::string percent(double v);
nlohmann::json summary_json(const variant_summary& v, const settings& s, const std::string& repro);
std::string points_warning(const std::vector<std::string>& points);
/// The crash-capture header's note where core_pattern gives every core in a directory one name
/// and runs crash together (--jobs > 1).
extern const char* const shared_core_name_note;
/// "interrupted: 8 of 10 runs not performed; --resume continues": what the summary of an
/// interrupted campaign ends with, so that it never reads as a finished one.
std::string interrupted_line(const campaign_result& r);
/// A --json summary's "interrupted" (true or false), and when true the campaign's
/// "campaign_runs_planned" and "campaign_runs_not_performed" (where it has a run count).
void mark_interrupted(nlohmann::json& j, const campaign_result& r);
void print_human(const variant_summary& v, const settings& s, const std::string& repro, const painter& paint,
                 std::ostream& out);
/// The options that change what a run does, as its replay line gives them again (a run record's
/// `replay`): --timeout when given, each --env, --crash-capture when not auto, --no-preload,
/// --late-cuda. Made here once; every repro line, the command's and the reports', reads them
/// from the record.
std::vector<std::string> replay_options(std::optional<std::chrono::milliseconds> timeout, const std::vector<std::string>& user_env,
                                        crash_capture crash, bool no_preload, bool late_cuda);
std::string repro_flags(const run_record& r);
std::string exec_repro(const run_record& r);
int report_runs(const std::vector<variant>& variants, settings& s, cli_context& ctx,
                const std::function<std::string(const run_record&)>& repro);

// list, run, exec and verify (cli_campaign.cc): each adds its subcommand (name, about text,
// options) to `app`, and runs once parsed.
struct exec_args {
  raw_args common;
  command_flags flags;
  std::vector<std::string> command;  // after --
};
CLI::App* add_list_command(CLI::App& app, bool& json);
CLI::App* add_run_command(CLI::App& app, raw_args& a);
CLI::App* add_exec_command(CLI::App& app, exec_args& a);
CLI::App* add_verify_command(CLI::App& app, raw_args& a);
int cmd_list(bool json, cli_context& ctx);
int cmd_run(const raw_args& a, cli_context& ctx);
int cmd_exec(const exec_args& a, cli_context& ctx);
int cmd_verify(const raw_args& a, cli_context& ctx);

// shrink and bisect (cli_triage.cc): from a failure to its cause (harness/triage/).
struct triage_args {
  std::string timeout, crash = "auto", grace = format_duration(default_grace);
  std::vector<std::string> env;
  command_flags flags;  // an exec run's, given again
};
struct shrink_args {
  std::string out, run, to, budget;
  std::uint64_t confirm = default_shrink_confirm_runs, max_runs = default_shrink_max_runs;
  bool json = false;
  triage_args common;
};
struct bisect_args {
  std::string good, bad, build, signature, seed, out = default_bisect_out_dir, repo = ".";
  std::uint64_t runs = default_bisect_runs, batch = default_bisect_batch;
  double alpha = default_bisect_alpha;
  triage_args common;
  std::vector<std::string> command;  // after --
};
void add_triage_options(CLI::App* sub, triage_args& a);
CLI::App* add_shrink_command(CLI::App& app, shrink_args& a);
CLI::App* add_bisect_command(CLI::App& app, bisect_args& a);
int cmd_shrink(const shrink_args& a, cli_context& ctx);
int cmd_bisect(const bisect_args& a, cli_context& ctx);

}  // namespace faultline::harness::cli_detail
