// The command line's error handling, in-process: every malformed argument is a usage error
// (exit status 2) whose message names the problem, --help prints the usage text, --version the
// version and commit, and README.md's "Command line" section names exactly the options that each
// command's --help lists.
#include "harness/cli.h"
#include "harness/cli_faults.h"
#include "faults/point_names.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "harness/version.h"

namespace faultline::harness {
namespace {

struct outcome_of {
  int status;
  std::string out, err;
};

outcome_of cli(std::vector<std::string> args) {
  args.insert(args.begin(), "faultline");
  std::ostringstream out, err;
  cli_context ctx{out, err};
  int status = run_cli(args, ctx);
  return {status, out.str(), err.str()};
}

void expect_usage_error(const std::vector<std::string>& args, const std::string& needle) {
  auto r = cli(args);
  EXPECT_EQ(r.status, exit_usage) << ::testing::PrintToString(args);
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  EXPECT_NE(r.err.find("faultline: error:"), std::string::npos) << r.err;
}

TEST(cli, requires_a_subcommand) { expect_usage_error({}, "subcommand"); }

TEST(cli, rejects_an_unknown_subcommand) { expect_usage_error({"frobnicate"}, "frobnicate"); }

TEST(cli, rejects_a_non_positive_repeat) { expect_usage_error({"run", "--all", "--repeat", "0"}, "--repeat"); }

TEST(cli, rejects_a_timeout_without_unit) { expect_usage_error({"run", "--all", "--timeout", "10"}, "missing unit"); }

TEST(cli, rejects_a_zero_timeout) { expect_usage_error({"exec", "--timeout", "0s", "--", "true"}, "must be positive"); }

TEST(cli, rejects_a_bad_shard) { expect_usage_error({"run", "--all", "--shard", "3/2"}, "not below the shard count"); }

TEST(cli, rejects_a_bad_seed) { expect_usage_error({"exec", "--seed", "-4", "--", "true"}, "--seed"); }

TEST(cli, rejects_a_target_rate_outside_zero_one) {
  expect_usage_error({"exec", "--target-rate", "1.5", "--", "true"}, "--target-rate");
}

TEST(cli, run_needs_scenarios_or_all) {
  expect_usage_error({"run"}, "name at least one SCENARIO");
  expect_usage_error({"run", "a/b", "--all"}, "not both");
}

TEST(cli, exec_needs_a_command) { expect_usage_error({"exec", "--repeat", "2"}, "no command"); }

TEST(cli, rejects_malformed_env_assignments) {
  expect_usage_error({"exec", "--env", "NOEQUALS", "--", "true"}, "expected K=V");
  expect_usage_error({"exec", "--env", "FAULTLINE_SEED=3", "--", "true"}, "set by faultline itself");
}

TEST(cli, rejects_a_malformed_fault_spec_before_any_run) {
  expect_usage_error({"exec", "--faults", "sim/x=fial", "--", "true"}, "column 7: expected an action");
  expect_usage_error({"run", "--all", "--faults", "bug/no/such=print"}, "--faults");
}

TEST(cli, refuses_what_the_agents_points_cannot_do) {
  expect_usage_error({"exec", "--faults", "exit/end=fail", "--", "true"}, "exit/end takes off, delay, abort, kill, print or stop");
  expect_usage_error({"exec", "--faults", "cuda/cudaFree=fail", "--", "true"}, "fail the driver call it makes instead");
  expect_usage_error({"exec", "--faults", "cuda/cuda*=2*fail", "--", "true"}, "cannot be failed");
  expect_usage_error({"exec", "--faults", "cuda/cuMemFree_v2=pause(x)", "--", "true"}, "not pause");
  expect_usage_error({"exec", "--faults", "sim/alloc=teardown(device)", "--", "true"}, "teardown(device) is for cuda/ points");
  expect_usage_error({"exec", "--faults", "cuda/cuMemFree_v2=fail(CUDA_ERROR_NOPE)", "--", "true"}, "CUDA driver error name");
  expect_usage_error({"exec", "--faults", "process/start@python3=fail(EAGAIN)", "--", "true"}, "process/start@python3 takes off");
  expect_usage_error({"exec", "--faults", "spawn/parent=teardown(0)", "--", "true"}, "stop or fail(ERRNO), not teardown");
  expect_usage_error({"exec", "--faults", "sim/alloc@python3=print", "--", "true"}, "an @filter is for");
  expect_usage_error({"exec", "--faults", "spawn/parent@=print", "--", "true"}, "expected a program name after '@'");
  expect_usage_error({"exec", "--faults", "lock/sem/acquired=fail(EAGAIN)", "--", "true"}, "lock/sem/acquired takes off, delay, abort, kill, print or stop, not fail");
  expect_usage_error({"exec", "--faults", "lock/mutex/wait@f=pause(r)", "--", "true"}, "or fail(ERRNO), not pause");
  expect_usage_error({"exec", "--faults", "posix/io/rw/write=teardown(0)", "--", "true"}, "stop or fail(ERRNO), not teardown");
  expect_usage_error({"exec", "--faults", "fn/lock_*=kill", "--", "true"}, "fn/ points name one function exactly");
  expect_usage_error({"exec", "--faults", "fn/lock_shrreg+0xZ=kill", "--", "true"},
                     "fn/lock_shrreg+0xZ: an fn/ point is fn/SYMBOL or fn/SYMBOL+OFFSET");
  expect_usage_error({"exec", "--faults", "fn/+4=kill", "--", "true"}, "an fn/ point is fn/SYMBOL or fn/SYMBOL+OFFSET");
  expect_usage_error({"run", "exit/static-pool", "--late-cuda", "--env", "CUDA_INJECTION64_PATH=/opt/profiler.so"},
                     "--late-cuda: CUDA_INJECTION64_PATH is set already");
  expect_usage_error({"exec", "--faults", "fn/lock_shrreg=fail", "--", "true"}, "fn/lock_shrreg takes off, delay, abort, kill, print or stop, not fail");
}

// Issue 28: a misspelt point of a program's families was accepted, ran, and was only reported
// "never reached". Each is refused before run 1, naming the item and the nearest valid name.
TEST(cli, refuses_misspelt_points_before_any_run) {
  expect_usage_error({"exec", "--faults", "lock/sem/held=kill", "--", "true"},
                     "lock/sem/held: no such point; expected lock/<sem|mutex|file>/<wait|acquired|release> (did you mean lock/sem/wait?)");
  expect_usage_error({"exec", "--faults", "lock/bogus/wait=kill", "--", "true"}, "lock/bogus/wait: no such point");
  expect_usage_error({"exec", "--faults", "nosuch/x=kill", "--", "true"}, "nosuch/x: no such family of points");
  expect_usage_error({"exec", "--faults", "exit/ned=kill", "--", "true"}, "(did you mean exit/end?)");
  expect_usage_error({"exec", "--faults", "process/strat=delay(1ms)", "--", "true"}, "(did you mean process/start?)");
  expect_usage_error({"exec", "--faults", "lock/sem/bogus*=kill", "--", "true"}, "lock/sem/bogus*: no such point");
  expect_usage_error({"agent-env", "--run-dir", "/tmp/faultline-cli-test-unused", "--faults", "nosuch/x=kill"}, "nosuch/x: no such family of points");
  // Agent families are checked for scenarios too; other names are the scenarios' own points.
  expect_usage_error({"run", "--all", "--faults", "exit/ned=kill"}, "exit/ned: no such point");
}

TEST(cli, refuses_posix_and_cuda_names_the_build_does_not_know) {
  if (!faults::has_place_table(*faults::family_of("posix/")))
    GTEST_SKIP() << "libfiu's fiu_posix_preload.so was not found at build time";
  expect_usage_error({"exec", "--faults", "posix/io/oc/opne=fail", "--", "true"},
                     "posix/io/oc/opne: no such point; expected posix/... as libfiu's POSIX preload names it (posix/io/oc/open) (did you mean posix/io/oc/open?)");
  expect_usage_error({"exec", "--faults", "posix/nosuch/*=fail", "--", "true"}, "posix/nosuch/*: no such point");
  EXPECT_NO_THROW(harness::check_agent_points(*faults::parse("posix/io/*=fail(EIO);libc/mm/malloc=fail"),
                                              harness::spec_reader::program));
  if (!faults::has_place_table(*faults::family_of("cuda/cu"))) GTEST_SKIP() << "no CUDA headers at build time";
  expect_usage_error({"exec", "--faults", "cuda/cuNoSuchCall=kill", "--", "true"}, "cuda/cuNoSuchCall: no such point");
  expect_usage_error({"exec", "--faults", "cuda/cudaFre=delay(1ms)", "--", "true"}, "(did you mean cuda/cudaFree?)");
  EXPECT_NO_THROW(harness::check_agent_points(
      *faults::parse("cuda/cuMemFree_v2=kill;cuda/cudaFree=delay(1ms);cuda/cuMem*=fail;cuda/cuMemcpy_ptds=kill"),
      harness::spec_reader::program));
}

TEST(cli, scenario_specs_keep_their_own_points) {
  EXPECT_NO_THROW(harness::check_agent_points(*faults::parse("sim/*=5%fail(ENOMEM);c/never=print;s*=delay(1ms)")));
  EXPECT_THROW(harness::check_agent_points(*faults::parse("c/never=print"), harness::spec_reader::program),
               harness::usage_error);
}

TEST(cli, rejects_an_unknown_stack_method) {
  expect_usage_error({"exec", "--stacks", "psychic", "--", "true"}, "expected auto, gdb, eu-stack, libdwfl, agent, proc or none");
}

TEST(cli, rejects_a_log_limit_that_is_not_a_size) {
  expect_usage_error({"exec", "--log-limit", "abc", "--", "true"}, "--log-limit 'abc': expected a size");
  expect_usage_error({"exec", "--log-limit", "-5", "--", "true"}, "--log-limit '-5': expected a size");
  expect_usage_error({"soak", "--budget", "1m", "--log-limit", "-1MiB"}, "--log-limit '-1MiB': expected a size");
}

TEST(cli, rejects_more_jobs_than_it_can_run_at_once) {
  expect_usage_error({"exec", "--jobs", "100000", "--", "true"}, "--jobs 100000: at most 1024 runs at once");
  expect_usage_error({"run", "--all", "--jobs", "1025"}, "--jobs 1025: at most 1024 runs at once");
  expect_usage_error({"exec", "--jobs", "0", "--", "true"}, "--jobs");
}

TEST(cli, rejects_an_unknown_keep_policy) {
  expect_usage_error({"exec", "--keep", "some", "--", "true"}, "--keep 'some': expected failures, all or none");
}

TEST(cli, resume_and_replace_exclude_each_other) {
  expect_usage_error({"exec", "--resume", "--replace", "--out", "/nonexistent/faultline-cli-test", "--", "true"},
                     "--resume and --replace exclude each other");
}

// `faultline exec -- ./nonexistent` used to record every run as an error and exit 1.
TEST(cli, exec_refuses_a_program_that_cannot_be_run_before_run_one) {
  const auto out = std::filesystem::temp_directory_path() / ("faultline-cli-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  expect_usage_error({"exec", "--out", out.string(), "--", "./nonexistent"}, "./nonexistent: no such file");
  expect_usage_error({"exec", "--out", out.string(), "--", "fl-no-such-program"}, "fl-no-such-program: not found in PATH");
  expect_usage_error({"exec", "--out", out.string(), "--", "/"}, "/: not a program (a directory)");
  const auto plain = std::filesystem::temp_directory_path() / ("faultline-cli-test-plain-" + std::to_string(::getpid()));
  std::ofstream(plain) << "#!/bin/sh\n";
  ::chmod(plain.c_str(), 0644);
  expect_usage_error({"exec", "--out", out.string(), "--", plain.string()}, plain.string() + ": not executable");
  std::filesystem::remove(plain);
  EXPECT_FALSE(std::filesystem::exists(out)) << "a refused command created its --out";
}

TEST(cli, version_prints_the_version_and_the_commit) {
  auto r = cli({"--version"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, version_line() + "\n");
  EXPECT_TRUE(std::regex_match(std::string(version()), std::regex(R"(\d+\.\d+\.\d+)"))) << version();
  EXPECT_TRUE(std::regex_match(std::string(build_commit()), std::regex(R"([0-9a-f]{4,40}|unknown)"))) << build_commit();
  EXPECT_NE(r.out.find("commit " + std::string(build_commit())), std::string::npos) << r.out;
}

TEST(cli, rejects_unknown_options) { expect_usage_error({"run", "--all", "--frobnicate"}, "--frobnicate"); }

TEST(cli, rejects_malformed_gtest_shard_variables) {
  ::setenv("GTEST_TOTAL_SHARDS", "3", 1);
  ::unsetenv("GTEST_SHARD_INDEX");
  expect_usage_error({"exec", "--", "true"}, "GTEST_SHARD_INDEX");
  ::unsetenv("GTEST_TOTAL_SHARDS");
}

TEST(cli, reports_a_missing_scenario_binary_as_a_configuration_error) {
  ::setenv("FAULTLINE_SCENARIOS", "/nonexistent/faultline-scenarios", 1);
  expect_usage_error({"list"}, "/nonexistent/faultline-scenarios");
  expect_usage_error({"run", "--all"}, "not found");
  ::unsetenv("FAULTLINE_SCENARIOS");
}

TEST(cli, help_prints_the_usage_text) {
  auto r = cli({"--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("subreaper"), std::string::npos);
  EXPECT_NE(r.out.find("exec"), std::string::npos);
  auto sub = cli({"exec", "--help"});
  EXPECT_EQ(sub.status, 0);
  EXPECT_NE(sub.out.find("--no-preload"), std::string::npos);
  EXPECT_NE(sub.out.find("--until-fail"), std::string::npos);
}

// Issue 38 (11): --help gave the cost of --late-cuda's stubs as 0.5 ns a call, the README as
// 0.9-1.4 ns. Both give the figures of the record they come from, which names them too.
TEST(cli, late_cuda_costs_the_same_in_help_readme_and_record) {
  auto squeeze = [](const std::string& text) {  // help and README wrap their lines
    std::string out;
    for (char c : text) {
      const bool blank = std::isspace(static_cast<unsigned char>(c)) != 0;
      if (blank && !out.empty() && out.back() == ' ') continue;
      out += blank ? ' ' : c;
    }
    return out;
  };
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const std::string figure = "+0.9 and +1.4 ns a call";
  const std::string record = "records/gpu/raw-2026-11-26-late-driver";
  for (const char* command : {"exec", "soak"}) {
    auto help = cli({command, "--help"});
    const std::string text = squeeze(help.out);
    EXPECT_NE(text.find(figure), std::string::npos) << command << ": " << text;
    EXPECT_NE(text.find(record), std::string::npos) << command;
    EXPECT_EQ(text.find("0.5 ns"), std::string::npos) << command;
  }
  const std::string readme = squeeze(slurp(std::filesystem::path(FAULTLINE_SOURCE_DIR) / "README.md"));
  EXPECT_NE(readme.find(figure), std::string::npos);
  EXPECT_NE(readme.find(record), std::string::npos);
  const std::string measured = slurp(std::filesystem::path(FAULTLINE_SOURCE_DIR) / record / "README.md");
  EXPECT_NE(measured.find("+1.4 ns"), std::string::npos);
  EXPECT_NE(measured.find("+0.9 ns"), std::string::npos);
}

// The long options a command's --help lists (its "Options:" block), --help and --help-all aside.
std::set<std::string> help_options(const std::vector<std::string>& command) {
  std::vector<std::string> args = command;
  args.push_back("--help");
  auto r = cli(args);
  EXPECT_EQ(r.status, 0) << r.err;
  std::set<std::string> options;
  std::istringstream in(r.out);
  std::string line;
  bool in_options = false;
  while (std::getline(in, line)) {
    if (line == "Options:" || line == "OPTIONS:") {
      in_options = true;
      continue;
    }
    if (!in_options) continue;
    if (line.empty()) break;
    if (line.rfind("  -", 0) != 0) continue;  // a description's continuation
    std::istringstream names(line.substr(2, line.find(' ', 2) - 2));
    std::string name;
    while (std::getline(names, name, ','))
      if (name.rfind("--", 0) == 0 && name != "--help" && name != "--help-all") options.insert(name);
  }
  return options;
}

// README.md's "## Command line" section: for each command its `### ` headings name (`faultline
// CMD`, or `faultline` alone for the top level), every --option their text mentions.
std::map<std::string, std::set<std::string>> readme_options() {
  std::ifstream in(std::filesystem::path(FAULTLINE_SOURCE_DIR) / "README.md");
  EXPECT_TRUE(in) << "README.md";
  std::map<std::string, std::set<std::string>> documented;
  const std::regex command_re(R"(`faultline( [a-z][a-z-]*)?`)"), option_re(R"((--[a-z][a-z0-9-]*))");
  std::vector<std::string> commands;
  bool in_section = false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      in_section = line == "## Command line";
      commands.clear();
      continue;
    }
    if (!in_section) continue;
    if (line.rfind("### ", 0) == 0) {
      commands.clear();
      for (std::sregex_iterator it(line.begin(), line.end(), command_re), end; it != end; ++it) {
        std::string c = (*it)[1].str();
        commands.push_back(c.empty() ? "" : c.substr(1));
        documented[commands.back()];
      }
      continue;
    }
    for (std::sregex_iterator it(line.begin(), line.end(), option_re), end; it != end; ++it)
      for (const auto& c : commands) documented[c].insert((*it)[1].str());
  }
  return documented;
}

TEST(cli, readme_documents_every_option_of_every_command) {
  const auto documented = readme_options();
  const std::vector<std::string> commands = {"",       "list",  "run",  "exec",  "verify",    "soak",  "shrink", "bisect",
                                             "region", "report", "gate", "cores", "agent-env", "agent-report"};
  for (const auto& c : commands) {
    SCOPED_TRACE("faultline " + c);
    auto doc = documented.find(c);
    ASSERT_NE(doc, documented.end()) << "README's Command line section has no heading naming `faultline " << c << "`";
    const auto help = help_options(c.empty() ? std::vector<std::string>{} : std::vector<std::string>{c});
    EXPECT_FALSE(help.empty());
    for (const auto& o : help) EXPECT_TRUE(doc->second.count(o)) << "--help lists " << o << ", README does not";
    for (const auto& o : doc->second)
      EXPECT_TRUE(help.count(o) || o == "--help" || o == "--help-all") << "README names " << o << ", --help does not";
  }
  for (const auto& [c, options] : documented)
    EXPECT_NE(std::find(commands.begin(), commands.end(), c), commands.end()) << "README documents an unknown command " << c;
}

}  // namespace
}  // namespace faultline::harness
