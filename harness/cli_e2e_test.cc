// The `faultline` binary end to end: exit statuses, the results file, the --json summaries,
// seeds and replay lines, --until-fail, sharding, and list/run/verify against the fake
// scenario binary (harness/tests/fake_scenarios.cc) standing in for faultline-scenarios.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <filesystem>
#include <thread>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/detail/proc.h"
#include "harness/detail/sys.h"
#include "harness/results/results.h"
#include "harness/run/core_dump.h"
#include "harness/run/process.h"
#include "harness/run/stacks.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

using testing::slurp;
using testing::results_in;

namespace fs = std::filesystem;
using testing::program;
using testing::run_faultline;

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    pos = nl + 1;
  }
  return out;
}


class cli_e2e : public ::testing::Test {
 protected:
  std::map<std::string, std::string> fake_env() { return {{"FAULTLINE_SCENARIOS", program("faultline-fake-scenarios").string()}}; }
  std::string out() { return (dir_.path() / "out").string(); }
  testing::scratch_dir dir_;
};

TEST_F(cli_e2e, exec_of_a_passing_program_exits_zero_and_records_every_run) {
  auto r = run_faultline({"exec", "--repeat", "3", "--seed", "40", "--out", out(), "--", program("fl_testdata_pass").string()});
  EXPECT_EQ(r.status, 0) << r.err;
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 3u);
  std::set<std::uint64_t> seeds;
  for (const auto& rec : recs) {
    EXPECT_EQ(rec.result, outcome::pass);
    EXPECT_EQ(rec.name, "fl_testdata_pass");
    EXPECT_FALSE(rec.injected);
    EXPECT_TRUE(fs::exists(fs::path(out()) / rec.log)) << rec.log;
    EXPECT_FALSE(rec.timestamp.empty());
    seeds.insert(rec.seed);
  }
  EXPECT_EQ(seeds, (std::set<std::uint64_t>{40, 41, 42}));
  EXPECT_NE(r.err.find("seed 40"), std::string::npos);
  EXPECT_NE(r.out.find("fl_testdata_pass: 3 runs"), std::string::npos) << r.out;
}

TEST_F(cli_e2e, exec_json_summary_has_the_contract_fields_and_a_replay_line) {
  auto r = run_faultline({"exec", "--json", "--repeat", "2", "--seed", "7", "--out", out(), "--target-rate", "0.01", "--",
                          program("fl_testdata_fail").string()});
  EXPECT_EQ(r.status, 1);
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  const auto& j = lines[0];
  EXPECT_EQ(j["name"], "fl_testdata_fail");
  EXPECT_EQ(j["runs"], 2);
  EXPECT_EQ(j["outcomes"]["fail"], 2);
  EXPECT_EQ(j["outcomes"]["pass"], 0);
  EXPECT_DOUBLE_EQ(j["failure_rate"].get<double>(), 1.0);
  EXPECT_TRUE(j.contains("failure_rate_lower95"));
  EXPECT_DOUBLE_EQ(j["failure_rate_upper95"].get<double>(), 1.0);
  ASSERT_EQ(j["signatures"].size(), 1u);
  EXPECT_EQ(j["signatures"][0]["signature"], "demo");
  EXPECT_EQ(j["signatures"][0]["count"], 2);
  EXPECT_EQ(j["signatures"][0]["phase"], "run");
  EXPECT_EQ(j["signatures"][0]["first_run"], "fl_testdata_fail.s7");
  EXPECT_EQ(j["seed"], 7);
  EXPECT_FALSE(j["containment"].get<std::string>().empty());  // which containment held the runs
  EXPECT_TRUE(j["crash_capture"] == "core" || j["crash_capture"] == "none") << j["crash_capture"];
  EXPECT_TRUE(j["runs_needed"].is_number());
  EXPECT_EQ(j["interrupted"], false);
  const std::string repro = j["repro"];
  EXPECT_NE(repro.find("faultline exec --seed 7 --repeat 1"), std::string::npos) << repro;
  EXPECT_NE(repro.find(program("fl_testdata_fail").string()), std::string::npos) << repro;

  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].result, outcome::fail);
  EXPECT_EQ(recs[0].exit_code, 3);
  EXPECT_EQ(recs[0].signature, "demo");
}

TEST_F(cli_e2e, exec_preloads_the_agent_so_an_exit_crash_is_an_exit_phase_crash) {
  // The in-process crash report names the frame on every machine (the default, the kernel's
  // core, is tested in crash_capture.*).
  auto r = run_faultline({"exec", "--json", "--crash-capture", "inside", "--out", out(), "--",
                          program("fl_testdata_exit_crash").string()});
  EXPECT_EQ(r.status, 1);
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].result, outcome::crash);
  EXPECT_EQ(recs[0].when, phase::exit);
  EXPECT_EQ(recs[0].signal, SIGSEGV);
  EXPECT_NE(recs[0].signature.find("exit_crash_destructor_frame"), std::string::npos) << recs[0].signature;
  // --no-preload: still a crash, but nothing can tell the phase.
  auto r2 = run_faultline({"exec", "--no-preload", "--out", out() + "2", "--", program("fl_testdata_exit_crash").string()});
  EXPECT_EQ(r2.status, 1);
  auto recs2 = results_in(out() + "2");
  ASSERT_EQ(recs2.size(), 1u);
  EXPECT_EQ(recs2[0].result, outcome::crash);
  EXPECT_EQ(recs2[0].when, phase::run);
}

TEST_F(cli_e2e, exec_records_a_hang_with_its_stack_dump) {
  auto r = run_faultline({"exec", "--timeout", "2s", "--out", out(), "--", program("fl_testdata_hang_grandchild").string()});
  EXPECT_EQ(r.status, 1);
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].result, outcome::hang);
  ASSERT_FALSE(recs[0].stacks.empty());
  EXPECT_GT(fs::file_size(fs::path(out()) / recs[0].stacks), 0u);
  EXPECT_FALSE(recs[0].frames.empty()) << "the blocked thread's top frames";
  // The printed summary points to them too.
  EXPECT_NE(r.out.find("      stacks: " + (fs::path(out()) / recs[0].stacks).string() + "\n        #0  "), std::string::npos) << r.out;
}

TEST_F(cli_e2e, a_hang_under_the_agent_is_never_named_by_faultlines_own_frames) {
  // gdb names the agent's start-up frame (it has debug info) but gives it no module; the stripped
  // shell and sleep have no named frame at all: the signature was "hang: wrapped_main".
  if (!gdb_available()) GTEST_SKIP() << "gdb is not on PATH";
  auto r = run_faultline({"exec", "--timeout", "1s", "--stacks", "gdb", "--out", out(), "--", "sh", "-c", "sleep 77"});
  EXPECT_EQ(r.status, 1) << r.err;
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].result, outcome::hang);
  EXPECT_EQ(recs[0].signature.rfind("hang: ", 0), 0u) << recs[0].signature;
  for (const char* own : {"wrapped_main", "hit_exit_point", "operator()", "faultline"})
    EXPECT_EQ(recs[0].signature.find(own), std::string::npos) << recs[0].signature;
}

// A hung Python program is named by its Python functions: py-spy reads them (where it is
// installed; CI sets FAULTLINE_REQUIRE_PY_SPY so that a missing one fails instead of skipping).
TEST_F(cli_e2e, a_hung_python_program_is_named_by_its_python_frames) {
  const bool required = std::getenv("FAULTLINE_REQUIRE_PY_SPY") != nullptr;
  if (!py_spy_program()) {
    if (required) FAIL() << "py-spy is not installed (pip install py-spy), and FAULTLINE_REQUIRE_PY_SPY is set";
    GTEST_SKIP() << "py-spy is not installed (pip install py-spy)";
  }
  if (!find_program("python3")) GTEST_SKIP() << "python3 is not on PATH";
  const fs::path script = dir_.path() / "stuck.py";
  std::ofstream(script) << "import threading, time\n"
                           "def serve_requests():\n"
                           "    threading.Event().wait()\n"
                           "def wait_for_the_child():\n"
                           "    time.sleep(600)\n"
                           "threading.Thread(target=serve_requests, daemon=True).start()\n"
                           "wait_for_the_child()\n";
  auto r = run_faultline({"exec", "--timeout", "3s", "--out", out(), "--", "python3", script.string()});
  EXPECT_EQ(r.status, 1) << r.err;
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].result, outcome::hang);
  EXPECT_EQ(recs[0].signature, "hang: serve_requests | wait_for_the_child") << r.out;
  ASSERT_FALSE(recs[0].stacks.empty());
  const std::string stacks = slurp(fs::path(out()) / recs[0].stacks);
  EXPECT_NE(stacks.find(" via py-spy ===\nThread "), std::string::npos) << stacks;
  EXPECT_NE(stacks.find("    wait_for_the_child (" + script.string() + ":5)"), std::string::npos) << stacks;
  // The frames shown are the Python ones too.
  ASSERT_FALSE(recs[0].frames.empty());
  EXPECT_EQ(recs[0].frames[0].rfind("wait_for_the_child", 0), 0u) << recs[0].frames[0];
}

TEST_F(cli_e2e, exec_passes_env_and_faults_to_the_run) {
  // --no-preload: the fixture needs no agent (and a sanitizer build of it refuses one).
  auto r = run_faultline({"exec", "--no-preload", "--env", "FAKE_ECHO=hello", "--faults", "x/y=off", "--seed", "5", "--out", out(), "--",
                          program("faultline-fake-scenarios").string(), "run", "fake/behave"});
  EXPECT_EQ(r.status, 0) << r.err;
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_TRUE(recs[0].injected);
  EXPECT_EQ(recs[0].faults, "x/y=off");
  auto log = testing::read_lines(fs::path(out()) / recs[0].log);
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log[0].find("seed=5 faults=x/y=off"), std::string::npos) << log[0];
  EXPECT_NE(log[0].find("echo=hello"), std::string::npos) << log[0];
}

TEST_F(cli_e2e, usage_errors_exit_two_with_the_problem_named) {
  auto r = run_faultline({"exec", "--timeout", "soon", "--", "true"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--timeout"), std::string::npos) << r.err;
}

TEST_F(cli_e2e, list_prints_the_catalog) {
  auto r = run_faultline({"list", "--json"}, fake_env());
  EXPECT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["name"], "fake/counter");
  EXPECT_EQ(j[0]["timeout_ms"], 10000);
  EXPECT_EQ(j[0]["bug_points"][0]["point"], "bug/fake/skip-check");
  EXPECT_DOUBLE_EQ(j[0]["bug_points"][0]["detect_rate"].get<double>(), 0.95);
  auto human = run_faultline({"list"}, fake_env());
  EXPECT_EQ(human.status, 0);
  EXPECT_NE(human.out.find("fake/behave"), std::string::npos);
}

TEST_F(cli_e2e, run_selects_by_pattern_and_rejects_unknown_names) {
  auto r = run_faultline({"run", "--env", "FAKE_ECHO=1", "fake/*", "--repeat", "2", "--json", "--out", out()}, fake_env());
  EXPECT_EQ(r.status, 0) << r.err;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["name"], "fake/counter");
  EXPECT_EQ(lines[1]["name"], "fake/behave");
  EXPECT_EQ(lines[0]["runs"], 2);
  EXPECT_TRUE(lines[0]["repro"].is_null());
  // Runs are numbered round-robin over the scenarios.
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].name, "fake/counter");
  EXPECT_EQ(recs[1].name, "fake/behave");
  EXPECT_EQ(recs[3].run, 3u);

  auto bad = run_faultline({"run", "nope/*", "--out", out()}, fake_env());
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("no scenario matches 'nope/*'"), std::string::npos) << bad.err;
}

TEST_F(cli_e2e, run_classifies_injected_crashes_and_hangs) {
  auto crash = run_faultline({"run", "fake/behave", "--faults", "fake/crash=print", "--json", "--out", out()}, fake_env());
  EXPECT_EQ(crash.status, 1);
  auto j = json_lines(crash.out).at(0);
  EXPECT_EQ(j["outcomes"]["crash"], 1);
  EXPECT_EQ(j["signatures"][0]["signature"].get<std::string>().rfind("SIGSEGV", 0), 0u);
  EXPECT_NE(j["repro"].get<std::string>().find("--faults fake/crash"), std::string::npos) << j["repro"];

  auto hang = run_faultline({"run", "fake/behave", "--faults", "fake/hang=print", "--timeout", "1s", "--json", "--out", out(), "--replace"},
                            fake_env());
  EXPECT_EQ(hang.status, 1);
  auto h = json_lines(hang.out).at(0);
  EXPECT_EQ(h["outcomes"]["hang"], 1);
  EXPECT_NE(h["repro"].get<std::string>().find("--timeout 1s"), std::string::npos);
}

TEST_F(cli_e2e, a_scenario_crash_is_read_from_its_core_in_its_own_run_directory) {
  // Scenarios run in their run directory: cores land there whatever the harness's directory holds
  // (a source tree's core/ folder stops a relative core_pattern), and the header says core.
  if (auto why = enable_core_capture(); !why.empty()) GTEST_SKIP() << "no core capture here: " << why;
  if (auto why = core_destination_problem(std::filesystem::temp_directory_path()); !why.empty()) GTEST_SKIP() << why;
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the fake scenario binary is built with ASan, which turns core dumps off (disable_coredump=1)";
#endif
  auto r = run_faultline({"run", "fake/behave", "--faults", "fake/crash=print", "--json", "--out", out()}, fake_env());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("faultline: crash capture core"), std::string::npos) << r.err;
  auto j = json_lines(r.out).at(0);
  EXPECT_EQ(j["crash_capture"], "core");
  const std::string sig = j["signatures"][0]["signature"];
  EXPECT_NE(sig, "SIGSEGV") << "the core's stacks name frames\n" << r.err;
  EXPECT_EQ(sig.rfind("SIGSEGV: ", 0), 0u) << sig;
  // The record, and the summary's signature, point to the stacks read from the core and show
  // the top frames.
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].stacks, "runs/" + recs[0].run_id + "/crash-stacks.txt");
  EXPECT_TRUE(fs::is_regular_file(fs::path(out()) / recs[0].stacks));
  EXPECT_FALSE(recs[0].frames.empty());
  EXPECT_EQ(j["signatures"][0]["stacks"], recs[0].stacks);
  EXPECT_EQ(j["signatures"][0]["frames"], nlohmann::json(recs[0].frames));
}

TEST_F(cli_e2e, with_core_capture_runs_dump_only_anonymous_private_memory) {
  if (auto why = enable_core_capture(); !why.empty()) GTEST_SKIP() << "no core capture here: " << why;
  auto filter_of_a_run = [&](const std::map<std::string, std::string>& env) {
    fs::remove_all(out());
    // Exit 1 so that the run's log is kept.
    auto r = run_faultline({"exec", "--crash-capture", "core", "--out", out(), "--", "/bin/sh", "-c",
                            "cat /proc/self/coredump_filter; exit 1"},
                           env);
    EXPECT_EQ(r.status, 1) << r.err;
    auto recs = results_in(out());
    if (recs.size() != 1) return std::string("no record: ") + r.err;
    std::ifstream log(fs::path(out()) / recs[0].log);
    std::string first;
    std::getline(log, first);
    return first;
  };
  EXPECT_EQ(filter_of_a_run({}), "00000011");
  EXPECT_EQ(filter_of_a_run({{"FAULTLINE_COREDUMP_FILTER", "0x33"}}), "00000033");
}

TEST_F(cli_e2e, late_cuda_makes_the_agent_the_cuda_injection_library_only_when_asked) {
  auto injection_of_a_run = [&](std::vector<std::string> extra, const std::map<std::string, std::string>& env) {
    fs::remove_all(out());
    std::vector<std::string> args = {"exec", "--out", out()};
    args.insert(args.end(), extra.begin(), extra.end());
    // Exit 1 so that the run's log is kept.
    for (std::string w : {"--", "/bin/sh", "-c", "echo \"[$CUDA_INJECTION64_PATH]\"; exit 1"}) args.push_back(w);
    auto r = run_faultline(args, env);
    EXPECT_EQ(r.status, 1) << r.err;
    auto recs = results_in(out());
    if (recs.size() != 1) return std::string("no record: ") + r.err;
    std::ifstream log(fs::path(out()) / recs[0].log);
    std::string first;
    std::getline(log, first);
    return first;
  };
  EXPECT_EQ(injection_of_a_run({}, {}), "[]");
  const std::string with = injection_of_a_run({"--late-cuda"}, {});
  EXPECT_NE(with.find("libfaultline_agent.so]"), std::string::npos) << with;
  // Another tool's injection library is not replaced: a clear refusal.
  auto clash = run_faultline({"exec", "--late-cuda", "--out", out(), "--", "/bin/true"}, {{"CUDA_INJECTION64_PATH", "/opt/profiler.so"}});
  EXPECT_EQ(clash.status, 2);
  EXPECT_NE(clash.err.find("CUDA_INJECTION64_PATH is set already"), std::string::npos) << clash.err;
}

TEST_F(cli_e2e, until_fail_stops_at_the_first_failure_and_its_repro_replays_it) {
  // Even seeds pass and odd seeds fail: from seed 10 the second run fails.
  auto r = run_faultline({"run", "fake/behave", "--faults", "fake/fail-on-odd-seed=print", "--seed", "10", "--until-fail", "--json",
                          "--out", out()},
                         fake_env());
  EXPECT_EQ(r.status, 1);
  auto j = json_lines(r.out).at(0);
  EXPECT_EQ(j["runs"], 2);
  EXPECT_EQ(j["outcomes"]["fail"], 1);
  EXPECT_EQ(j["signatures"][0]["signature"], "fake/even-seed");
  const std::string repro = j["repro"];
  EXPECT_NE(repro.find("--seed 11 --repeat 1"), std::string::npos) << repro;

  // Replaying the repro line (minus the program name) fails the same way.
  std::vector<std::string> args;
  std::string word;
  bool quoted = false;
  for (char c : repro.substr(std::string("faultline ").size())) {
    if (c == '\'') quoted = !quoted;
    else if (c == ' ' && !quoted) {
      args.push_back(word);
      word.clear();
    } else word += c;
  }
  args.push_back(word);
  args.insert(args.end(), {"--json", "--out", out() + "-replay"});
  auto replay = run_faultline(args, fake_env());
  EXPECT_EQ(replay.status, 1) << replay.err;
  auto rj = json_lines(replay.out).at(0);
  EXPECT_EQ(rj["runs"], 1);
  EXPECT_EQ(rj["signatures"][0]["signature"], "fake/even-seed");
}

TEST_F(cli_e2e, shards_split_the_runs_between_them_exactly_once) {
  std::multiset<std::uint64_t> runs;
  for (const char* s : {"0/3", "1/3", "2/3"}) {
    std::string o = out() + "-" + std::string(1, s[0]);
    auto r = run_faultline({"run", "--all", "--repeat", "4", "--seed", "1", "--shard", s, "--out", o}, fake_env());
    EXPECT_EQ(r.status, 0) << r.err;
    for (const auto& rec : results_in(o)) {
      EXPECT_EQ(rec.run % 3, static_cast<std::uint64_t>(s[0] - '0'));
      runs.insert(rec.run);
    }
  }
  std::multiset<std::uint64_t> all;
  for (std::uint64_t k = 0; k < 8; ++k) all.insert(k);
  EXPECT_EQ(runs, all);
}

TEST_F(cli_e2e, gtest_shard_variables_shard_the_runs_and_are_not_passed_on) {
  auto env = fake_env();
  env["GTEST_TOTAL_SHARDS"] = "2";
  env["GTEST_SHARD_INDEX"] = "1";
  env["GTEST_SHARD_STATUS_FILE"] = (dir_.path() / "shard-status").string();
  auto r = run_faultline({"run", "fake/behave", "--repeat", "4", "--out", out()}, env);
  EXPECT_EQ(r.status, 0) << r.err;
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].run, 1u);
  EXPECT_EQ(recs[1].run, 3u);
  EXPECT_TRUE(fs::exists(dir_.path() / "shard-status"));  // sharding acknowledged
  auto log = testing::read_lines(fs::path(out()) / recs[0].log);
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log[0].find("gtest_shards="), std::string::npos);
  EXPECT_EQ(log[0].substr(log[0].size() - std::string("gtest_shards=").size()), "gtest_shards=") << log[0];
}

TEST_F(cli_e2e, verify_passes_when_clean_runs_pass_and_bugs_are_detected) {
  auto r = run_faultline({"verify", "--repeat", "3", "--out", out()}, fake_env());
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("bug/fake/skip-check"), std::string::npos);
  EXPECT_NE(r.out.find("all checks hold"), std::string::npos) << r.out;

  auto j = run_faultline({"verify", "fake/counter", "--repeat", "3", "--json", "--out", out(), "--replace"}, fake_env());
  EXPECT_EQ(j.status, 0);
  auto rows = json_lines(j.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["variant"], "clean");
  EXPECT_EQ(rows[0]["failures"], 0);
  EXPECT_EQ(rows[0]["ok"], true);
  EXPECT_EQ(rows[1]["variant"], "bug/fake/skip-check");
  EXPECT_EQ(rows[1]["detections"], 3);
  EXPECT_DOUBLE_EQ(rows[1]["rate"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(rows[1]["required_rate"].get<double>(), 0.95);
  EXPECT_EQ(rows[1]["ok"], true);

  // verify continues its campaign with --resume (seed and repeat from it) and refuses a new one
  // in the same --out without --replace.
  auto resumed = run_faultline({"verify", "fake/counter", "--resume", "--out", out()}, fake_env());
  EXPECT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("6 runs were already recorded, 0 performed now"), std::string::npos) << resumed.err;
  auto refused = run_faultline({"verify", "fake/counter", "--repeat", "3", "--out", out()}, fake_env());
  EXPECT_EQ(refused.status, 2) << refused.err;
  EXPECT_NE(refused.err.find(" holds a campaign (6 runs recorded: 'fake/counter', 'fake/counter@bug/fake/skip-check')"),
            std::string::npos)
      << refused.err;
}

TEST_F(cli_e2e, verify_fails_when_a_bug_point_goes_undetected) {
  auto env = fake_env();
  env["FAKE_SCENARIOS_MISS_BUG"] = "1";
  auto r = run_faultline({"verify", "fake/counter", "--repeat", "2", "--out", out()}, env);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
}

// Live sleep processes whose command line contains `needle` (a duration unique to one test).
std::vector<pid_t> processes_running(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& p : detail::snapshot()) {
    if (p.state == 'Z' || p.comm != "sleep") continue;
    auto cmd = detail::read_file("/proc/" + std::to_string(p.pid) + "/cmdline", 4096);
    if (cmd && cmd->find(needle) != std::string::npos) out.push_back(p.pid);
  }
  return out;
}

TEST_F(cli_e2e, concurrent_runs_attribute_each_leak_to_its_own_run) {
  auto r = run_faultline({"exec", "--jobs", "3", "--repeat", "6", "--out", out(), "--", program("fl_testdata_leak_child").string()});
  EXPECT_EQ(r.status, 1);
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 6u);
  std::set<int> pids;
  for (const auto& rec : recs) {
    EXPECT_EQ(rec.result, outcome::leak) << rec.signature;
    ASSERT_EQ(rec.leaked_pids.size(), 1u);
    pids.insert(rec.leaked_pids[0]);
    EXPECT_FALSE(testing::alive(rec.leaked_pids[0]));
  }
  EXPECT_EQ(pids.size(), 6u);
}

TEST_F(cli_e2e, concurrent_hangs_are_all_killed) {
  auto r = run_faultline({"exec", "--jobs", "4", "--repeat", "4", "--timeout", "1s", "--no-stacks", "--out", out(), "--",
                          "/bin/sh", "-c", "sleep 302.25 & sleep 302.25"});
  EXPECT_EQ(r.status, 1);
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 4u);
  for (const auto& rec : recs) EXPECT_EQ(rec.result, outcome::hang);
  EXPECT_EQ(processes_running("302.25"), std::vector<pid_t>{});
}

TEST_F(cli_e2e, orphans_no_run_can_claim_are_killed_before_faultline_exits) {
  // With two runs in flight, an orphan that cleared its environment names neither: it is
  // claimed by a run if that run is alone by then, else killed by the final sweep.
  auto r = run_faultline({"exec", "--jobs", "2", "--repeat", "2", "--out", out(), "--", "/bin/sh", "-c",
                          "(setsid env -i /bin/sleep 301.5 &) ; sleep 0.3"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(processes_running("301.5"), std::vector<pid_t>{});
}

TEST_F(cli_e2e, interrupt_kills_the_runs_in_flight_and_exits_130) {
  spawn_options o;
  o.argv = {(testing::bin_dir() / "faultline").string(), "exec", "--timeout", "5m", "--out", out(), "--", "/bin/sh", "-c",
            "sleep 303.75 & sleep 303.75"};
  o.envp = current_environment();
  auto c = spawn(o);
  ASSERT_TRUE(c) << c.error().message();
  // Wait until the run is under way, then interrupt faultline as a terminal would.
  for (int i = 0; i < 500 && processes_running("303.75").size() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(processes_running("303.75").size(), 2u);
  c->signal(SIGINT);
  ASSERT_TRUE(c->wait_exit_for(std::chrono::seconds(60)));
  int status = c->reap();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_EQ(processes_running("303.75"), std::vector<pid_t>{});
}

// Issue 38 (11): where every core in a directory has one name, the crash-capture header said "a
// core replaced within microseconds of its creation is still lost, which `faultline cores
// --install` keeps every crash's core (root)". It now says it plainly.
TEST_F(cli_e2e, the_shared_core_name_note_reads_plainly) {
  // Run from the scratch directory: the build's own tree holds a core/ folder, where no core can
  // be written at all (another header).
  const fs::path err_file = dir_.path() / "stderr";
  auto sh = run_tool({"/bin/sh", "-c",
                      "cd " + detail::shell_quote(dir_.path().string()) + " && exec " +
                          detail::shell_quote((testing::bin_dir() / "faultline").string()) +
                          " exec --jobs 2 --repeat 2 --crash-capture core --out " + detail::shell_quote(out()) + " -- " +
                          detail::shell_quote(program("fl_testdata_pass").string()) + " 2>" + detail::shell_quote(err_file.string())},
                     std::chrono::seconds(60));
  ASSERT_TRUE(sh && WIFEXITED(sh->status) && WEXITSTATUS(sh->status) == 0);
  testing::command_result r;
  r.err = slurp(err_file);
  if (core_names_are_unique() || r.err.find("crash capture core") == std::string::npos)
    GTEST_SKIP() << "core_pattern names each core apart here, or cores cannot be captured: no note";
  EXPECT_NE(r.err.find("core_pattern gives every core in a directory the same name: faultline opens each core as soon as it "
                       "appears, so runs that crash together keep their own, but a core that the next crash replaces within "
                       "microseconds is lost; `faultline cores --install` (as root) keeps every core"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("lost, which"), std::string::npos) << r.err;
}

// Issue 38 (11): a hang inside a `sh -c` wrapper was signed by the stripped shell's frame
// ("hang: dash+0xbcc0"), and a Python hang read without py-spy by the interpreter's C frames, with
// no word that py-spy would name the Python functions.
TEST_F(cli_e2e, a_hang_names_no_offset_and_a_python_hang_says_what_would_name_it) {
  auto sh = run_faultline({"exec", "--json", "--timeout", "1s", "--out", out() + "-sh", "--", "/bin/sh", "-c", "sleep 307.5; true"});
  EXPECT_EQ(sh.status, 1) << sh.err;
  auto lines = json_lines(sh.out);
  ASSERT_EQ(lines.size(), 1u) << sh.out;
  const std::string signature = lines[0]["signatures"][0]["signature"];
  EXPECT_EQ(signature.rfind("hang", 0), 0u) << signature;
  EXPECT_EQ(signature.find("+0x"), std::string::npos) << signature;
  for (const auto& f : lines[0]["signatures"][0]["frames"]) {
    const std::string frame = f;
    if (frame.find("+0x") != std::string::npos) {
      EXPECT_NE(frame.find(", no symbol)"), std::string::npos) << frame;
    }
  }

  std::error_code ec;
  if (py_spy_program() || !fs::exists("/usr/bin/python3", ec)) GTEST_SKIP() << "py-spy is installed, or no /usr/bin/python3";
  auto py = run_faultline({"exec", "--timeout", "1s", "--out", out() + "-py", "--", "/usr/bin/python3", "-c", "import time; time.sleep(307.5)"});
  EXPECT_EQ(py.status, 1) << py.err;
  EXPECT_NE(py.out.find("hang: "), std::string::npos) << py.out;
  EXPECT_NE(py.out.find("(these are the Python interpreter's own frames: with py-spy on PATH (pip install py-spy), or "
                        "FAULTLINE_PY_SPY naming it, a hang's stacks and signature name the Python functions)"),
            std::string::npos)
      << py.out;
}

// Issue 38 (8): an interrupted campaign (SIGINT, exit 130) printed a summary that read like a
// finished campaign's. It now says how many of its runs were not performed, and --json says so too.
TEST_F(cli_e2e, an_interrupted_campaign_says_how_many_runs_were_not_performed) {
  for (const bool json : {false, true}) {
    const std::string o = out() + (json ? "-json" : "-text");
    const fs::path printed = dir_.path() / (json ? "stdout-json" : "stdout-text");
    // Runs 0 and 1 (seeds 0 and 1) pass at once; run 2 sleeps until the interrupt.
    const std::string faultline = detail::shell_quote((testing::bin_dir() / "faultline").string());
    const std::string script = "if [ $FAULTLINE_SEED -ge 2 ]; then exec sleep 305.25; fi";
    spawn_options so;
    so.argv = {"/bin/sh", "-c",
               "exec " + faultline + " exec --repeat 10 --seed 0 --jobs 1 --timeout 5m --no-stacks" + (json ? " --json" : "") +
                   " --out " + detail::shell_quote(o) + " -- /bin/sh -c " + detail::shell_quote(script) + " >" +
                   detail::shell_quote(printed.string()) + " 2>/dev/null"};
    so.envp = current_environment();
    auto c = spawn(so);
    ASSERT_TRUE(c) << c.error().message();
    for (int i = 0; i < 500 && processes_running("305.25").empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(processes_running("305.25").size(), 1u);
    c->signal(SIGINT);
    ASSERT_TRUE(c->wait_exit_for(std::chrono::seconds(60)));
    const int status = c->reap();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 130);
    const std::string text = slurp(printed);
    if (json) {
      auto lines = json_lines(text);
      ASSERT_EQ(lines.size(), 1u) << text;
      EXPECT_EQ(lines[0]["runs"], 2) << text;
      EXPECT_EQ(lines[0]["interrupted"], true) << text;
      EXPECT_EQ(lines[0]["campaign_runs_planned"], 10) << text;
      EXPECT_EQ(lines[0]["campaign_runs_not_performed"], 8) << text;
    } else {
      EXPECT_NE(text.find("sh: 2 runs, pass 2"), std::string::npos) << text;
      EXPECT_NE(text.find("\ninterrupted: 8 of 10 runs not performed; --resume continues\n"), std::string::npos) << text;
    }
  }
  EXPECT_EQ(processes_running("305.25"), std::vector<pid_t>{});
}

// --- cores: wherever a run's process stands when it crashes, its core is read and goes ---------
// Where core_pattern is a plain name relative to the crashing process ("core", this CI machine's),
// the kernel writes a core where the process stands. Issue 38: a process that had left the
// directory faultline started it in lost its stack and left its core there; one standing in a
// directory with a core/ folder could not dump at all; a passing run whose child crashed left its
// core in the user's directory.

// Why these tests cannot run here ("" when they can).
std::string cores_do_not_follow_the_process(const fs::path& dir) {
  if (auto why = enable_core_capture(); !why.empty()) return "no core capture here: " + why;
  if (!core_home(dir)) return "core_pattern does not name a file relative to the crashing process";
#if defined(__SANITIZE_ADDRESS__)
  return "ASan turns core dumps off";
#endif
  return {};
}

TEST_F(cli_e2e, a_passing_run_whose_child_crashed_leaves_no_core_in_the_users_directory) {
  const fs::path cwd = dir_.path() / "work";
  fs::create_directories(cwd);
  if (auto why = cores_do_not_follow_the_process(cwd); !why.empty()) GTEST_SKIP() << why;
  auto r = testing::run_faultline_in(cwd, {"exec", "--repeat", "4", "--jobs", "2", "--json", "--out", out(), "--",
                                           program("fl_testdata_child_crash").string()});
  EXPECT_EQ(r.status, 0) << r.err;
  auto j = json_lines(r.out).at(0);
  EXPECT_EQ(j["outcomes"]["pass"], 4) << r.out;
  EXPECT_EQ(testing::core_files_under(dir_.path()), std::vector<fs::path>{}) << "cores left behind";
}

TEST_F(cli_e2e, a_crash_away_from_where_the_run_started_is_named_by_its_frames_and_leaves_no_core_there) {
  // As every run under bisect: a shell moves into another directory, then runs the program. One
  // job: this program crashes the moment it starts, and two runs crashing together in one
  // directory before the keeper has followed them there can lose a core (core_keeper.h).
  const fs::path cwd = dir_.path() / "work";
  fs::create_directories(cwd / "elsewhere");
  if (auto why = cores_do_not_follow_the_process(cwd); !why.empty()) GTEST_SKIP() << why;
  auto r = testing::run_faultline_in(cwd, {"exec", "--repeat", "4", "--json", "--out", out(), "--", "/bin/sh",
                                           "-c", "cd elsewhere && exec " + program("fl_testdata_crash_in_work").string()});
  EXPECT_EQ(r.status, 1) << r.err;
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 4u) << r.err;
  for (const auto& rec : recs) {
    EXPECT_EQ(rec.result, outcome::crash);
    EXPECT_NE(rec.signature.find("crash_in_work_frame"), std::string::npos) << rec.signature;
  }
  EXPECT_EQ(testing::core_files_under(dir_.path()), std::vector<fs::path>{}) << "cores left behind";
}

TEST_F(cli_e2e, a_crash_in_a_directory_holding_a_core_folder_says_why_no_stack_is_read) {
  // A build directory (a source tree's core/ built there): the kernel cannot write ./core, and
  // only a crash handler could move the process (measured: it takes most crashes out of an exit
  // race, records/fidelity/cpu2-cores-2026-11-28.md). The header names the cause and the remedy.
  const fs::path cwd = dir_.path() / "build";
  fs::create_directories(cwd / "core");
  if (auto why = cores_do_not_follow_the_process(cwd); !why.empty()) GTEST_SKIP() << why;
  auto r = testing::run_faultline_in(cwd, {"exec", "--repeat", "2", "--json", "--out", out(), "--",
                                           program("fl_testdata_crash_in_work").string()});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("crash capture none"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("faultline cores --install"), std::string::npos) << r.err;
  auto recs = results_in(out());
  ASSERT_EQ(recs.size(), 2u) << r.err;
  for (const auto& rec : recs) EXPECT_EQ(rec.signature, "SIGSEGV");
  EXPECT_EQ(testing::core_files_under(dir_.path()), std::vector<fs::path>{}) << "cores left behind";
}

}  // namespace
}  // namespace faultline::harness

namespace faultline::harness {
namespace {

// The agent interposes chdir() (to follow where a process stands, for its core). GoogleTest's
// death tests call chdir() in a clone(CLONE_VM) child on a stack of a page or two before they
// exec: an agent that looked up the next chdir or wrote its record there killed that child with
// SIGSEGV, and every death test under `faultline exec` failed (faultline's own hunt of its tests
// found it: sim_backend_test and alloc_test failed 36/36 and 26/26).
TEST(cli_e2e_agent, googletest_death_tests_pass_under_the_agent) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "this build's alloc_test has ASan, which refuses a preloaded library ahead of it";
#endif
  const fs::path alloc_test = testing::bin_dir() / "alloc_test";
  if (!fs::exists(alloc_test)) GTEST_SKIP() << alloc_test << " is not built";
  testing::scratch_dir dir;
  auto r = run_faultline({"exec", "--repeat", "2", "--json", "--out", (dir.path() / "out").string(), "--",
                          alloc_test.string(), "--gtest_filter=process_exit.default_pools_make_no_device_call_after_the_runtime_teardown"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\"pass\":2"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace faultline::harness
