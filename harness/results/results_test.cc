// Results file: a record survives the JSON round trip field for field, appends are whole lines,
// and the reader tolerates exactly one thing — an unterminated last line left by a killed
// writer — while rejecting corruption anywhere else.
#include "harness/results/results.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace faultline::harness {
namespace {

run_record sample(std::uint64_t run) {
  run_record r;
  r.run_id = "exit-static-pool.s" + std::to_string(100 + run);
  r.run = run;
  r.name = "exit/static-pool";
  r.seed = 100 + run;
  r.faults = "bug/alloc/no-exit-guard=1*print";
  r.injected = true;
  r.result = outcome::crash;
  r.when = phase::exit;
  r.signal = SIGSEGV;
  r.duration_ms = 1234;
  r.signature = "SIGSEGV: pool::~pool | main";
  r.log = "logs/" + r.run_id + ".log";
  r.stacks = "";
  r.leaked_pids = {41, 42};
  r.leaked_shm = {"faultline-acct"};
  r.timestamp = "2024-11-21T19:30:00.123Z";
  r.command = {"/bin/faultline-scenarios", "run", "exit/static-pool"};
  return r;
}

TEST(run_record, json_round_trip_keeps_every_field) {
  run_record a = sample(7);
  run_record b = nlohmann::json(a).get<run_record>();
  EXPECT_EQ(b.run_id, a.run_id);
  EXPECT_EQ(b.run, 7u);
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.seed, 107u);
  EXPECT_EQ(b.faults, a.faults);
  EXPECT_TRUE(b.injected);
  EXPECT_EQ(b.result, outcome::crash);
  EXPECT_EQ(b.when, phase::exit);
  EXPECT_FALSE(b.exit_code.has_value());
  EXPECT_EQ(b.signal, SIGSEGV);
  EXPECT_EQ(b.duration_ms, 1234);
  EXPECT_EQ(b.signature, a.signature);
  EXPECT_EQ(b.log, a.log);
  EXPECT_EQ(b.stacks, "");
  EXPECT_EQ(b.leaked_pids, a.leaked_pids);
  EXPECT_EQ(b.leaked_shm, a.leaked_shm);
  EXPECT_EQ(b.timestamp, a.timestamp);
  EXPECT_EQ(b.command, a.command);
}

TEST(run_record, json_uses_the_documented_shape) {
  auto j = nlohmann::json(sample(0));
  EXPECT_EQ(j["outcome"], "crash");
  EXPECT_EQ(j["phase"], "exit");
  EXPECT_TRUE(j["exit_code"].is_null());
  EXPECT_EQ(j["signal"]["name"], "SIGSEGV");
  EXPECT_EQ(j["signal"]["number"], SIGSEGV);
  EXPECT_TRUE(j["stacks"].is_null());
  run_record pass;
  pass.run_id = "x.s1";
  pass.exit_code = 0;
  auto p = nlohmann::json(pass);
  EXPECT_TRUE(p["phase"].is_null());
  EXPECT_TRUE(p["signal"].is_null());
  EXPECT_EQ(p["exit_code"], 0);
  EXPECT_TRUE(p["faults"].is_null());
  EXPECT_FALSE(p["injected"].get<bool>());
}

TEST(signal_name, names_classic_and_realtime_signals) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGABRT), "SIGABRT");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGRTMIN + 7), "SIGRTMIN+7");
}

TEST(parse_results, tolerates_a_truncated_last_line) {
  std::string text = nlohmann::json(sample(0)).dump() + "\n" + nlohmann::json(sample(1)).dump() + "\n";
  std::string torn = nlohmann::json(sample(2)).dump();
  text += torn.substr(0, torn.size() / 2);  // the writer died mid-line
  auto r = parse_results(text);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->records.size(), 2u);
  EXPECT_TRUE(r->truncated_tail);
  EXPECT_EQ(r->records[1].run, 1u);
}

TEST(parse_results, reads_a_complete_file_without_trailing_newline) {
  std::string text = nlohmann::json(sample(0)).dump() + "\n" + nlohmann::json(sample(1)).dump();
  auto r = parse_results(text);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->records.size(), 2u);
  EXPECT_FALSE(r->truncated_tail);
}

TEST(parse_results, rejects_a_corrupt_line_that_is_not_the_last) {
  std::string text = nlohmann::json(sample(0)).dump() + "\n{\"run_id\": \n" + nlohmann::json(sample(1)).dump() + "\n";
  auto r = parse_results(text);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.code(), core::errc::corrupt);
  EXPECT_NE(r.error().message().find("line 2"), std::string::npos);
}

TEST(parse_results, rejects_an_unknown_outcome) {
  auto j = nlohmann::json(sample(0));
  j["outcome"] = "exploded";
  auto r = parse_results(j.dump() + "\n" + nlohmann::json(sample(1)).dump() + "\n");
  EXPECT_FALSE(r);
}

TEST(results_writer, appends_one_line_per_record_from_many_threads) {
  auto dir = std::filesystem::temp_directory_path() / ("fl_results_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / "results.jsonl";
  {
    results_writer w;
    ASSERT_TRUE(w.open(path));
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) ASSERT_TRUE(w.append(sample(static_cast<std::uint64_t>(t * 50 + i))));
      });
    for (auto& t : ts) t.join();
  }
  auto r = read_results(path);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->records.size(), 200u);
  EXPECT_FALSE(r->truncated_tail);
  std::vector<bool> seen(200, false);
  for (const auto& rec : r->records) seen.at(rec.run) = true;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 200);
  std::filesystem::remove_all(dir);
}

TEST(results_writer, a_signature_that_is_not_utf8_is_written_with_replacement_characters) {
  auto dir = std::filesystem::temp_directory_path() / ("fl_results_utf8." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / "results.jsonl";
  {
    results_writer w;
    ASSERT_TRUE(w.open(path));
    run_record rec = sample(0);
    rec.signature = "fail: invariant violated: bad \xff\xfe bytes";  // a program's own output
    ASSERT_TRUE(w.append(rec));
  }
  auto r = read_results(path);
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->records.size(), 1u);
  EXPECT_EQ(r->records[0].signature, "fail: invariant violated: bad \xef\xbf\xbd\xef\xbf\xbd bytes");
  std::filesystem::remove_all(dir);
}

TEST(run_record, points_reached_round_trips_and_is_left_out_when_empty) {
  auto a = sample(3);
  EXPECT_FALSE(nlohmann::json(a).contains("points_reached"));
  a.points_reached = {"exit/end", "sim/*"};
  auto j = nlohmann::json(a);
  EXPECT_EQ(j["points_reached"], nlohmann::json({"exit/end", "sim/*"}));
  EXPECT_EQ(j.get<run_record>().points_reached, a.points_reached);
}

TEST(run_record, replay_options_round_trip_and_are_left_out_when_none) {
  auto a = sample(3);
  EXPECT_FALSE(nlohmann::json(a).contains("replay"));
  a.replay = {"--timeout", "30s", "--env", "K=a b", "--no-preload"};
  auto j = nlohmann::json(a);
  EXPECT_EQ(j["replay"], nlohmann::json({"--timeout", "30s", "--env", "K=a b", "--no-preload"}));
  EXPECT_EQ(j.get<run_record>().replay, a.replay);
}

TEST(run_record, frames_round_trip_and_are_left_out_when_empty) {
  auto a = sample(3);
  EXPECT_FALSE(nlohmann::json(a).contains("frames"));
  a.stacks = "runs/x.s3/crash-stacks.txt";
  a.frames = {"pool::release  (prog)", "main  (prog)"};
  auto j = nlohmann::json(a);
  EXPECT_EQ(j["frames"], nlohmann::json({"pool::release  (prog)", "main  (prog)"}));
  EXPECT_EQ(j["stacks"], "runs/x.s3/crash-stacks.txt");
  EXPECT_EQ(j.get<run_record>().frames, a.frames);
}

TEST(run_record, late_cuda_calls_round_trip_and_are_left_out_when_none) {
  auto a = sample(3);
  EXPECT_FALSE(nlohmann::json(a).contains("late_cuda"));
  a.late_cuda = {{"cudaFree", 3, "late-cuda: cudaFree \u2190 pool::~pool"}, {"cuMemFree_v2", 1, "late-cuda: cuMemFree_v2"}};
  auto j = nlohmann::json(a);
  ASSERT_EQ(j["late_cuda"].size(), 2u);
  EXPECT_EQ(j["late_cuda"][0]["api"], "cudaFree");
  EXPECT_EQ(j["late_cuda"][0]["calls"], 3);
  const auto b = j.get<run_record>();
  ASSERT_EQ(b.late_cuda.size(), 2u);
  EXPECT_EQ(b.late_cuda[1].api, "cuMemFree_v2");
  EXPECT_EQ(b.late_cuda[1].calls, 1u);
  EXPECT_EQ(b.late_cuda[0].signature, a.late_cuda[0].signature);
  j["late_cuda"] = "cudaFree";  // not a list: a bad results file, refused
  EXPECT_THROW((void)j.get<run_record>(), nlohmann::json::exception);
}

TEST(run_record, a_pruned_run_has_null_log_and_stacks) {
  auto a = sample(3);
  a.log.clear();
  auto j = nlohmann::json(a);
  EXPECT_TRUE(j["log"].is_null());
  EXPECT_TRUE(j["stacks"].is_null());
  auto b = j.get<run_record>();
  EXPECT_EQ(b.log, "");
  EXPECT_EQ(b.stacks, "");
}

class results_file_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fl_results_file_test." + std::to_string(::getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = dir_ / "results.jsonl";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& text) { std::ofstream(path_, std::ios::binary) << text; }
  std::string text() {
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static std::string line(std::uint64_t run) { return nlohmann::json(sample(run)).dump() + "\n"; }
  std::filesystem::path dir_, path_;
};

TEST_F(results_file_test, scan_hands_over_every_record_with_its_line_number) {
  write(line(0) + "\n" + line(1) + line(2));
  std::vector<std::pair<std::uint64_t, std::uint64_t>> seen;  // run, line
  auto scan = scan_results(path_, [&](run_record&& r, std::uint64_t n) {
    seen.emplace_back(r.run, n);
    return core::status();
  });
  ASSERT_TRUE(scan) << scan.error().message();
  EXPECT_EQ(scan->records, 3u);
  EXPECT_FALSE(scan->truncated_tail);
  EXPECT_EQ(scan->valid_bytes, text().size());
  EXPECT_EQ(seen, (std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 1}, {1, 3}, {2, 4}}));
}

TEST_F(results_file_test, scan_stops_at_the_visitors_error) {
  write(line(0) + line(1) + line(2));
  int calls = 0;
  auto scan = scan_results(path_, [&](run_record&&, std::uint64_t n) {
    ++calls;
    return n == 2 ? core::status(core::errc::invalid_argument, "not mine") : core::status();
  });
  ASSERT_FALSE(scan);
  EXPECT_EQ(scan.error().message(), "not mine");
  EXPECT_EQ(calls, 2);
}

TEST_F(results_file_test, garbage_in_the_middle_is_an_error_naming_file_and_line) {
  write(line(0) + line(1) + "#garbage\x01{{\n" + line(3));
  auto scan = scan_results(path_, nullptr);
  ASSERT_FALSE(scan);
  EXPECT_EQ(scan.code(), core::errc::corrupt);
  EXPECT_NE(scan.error().message().find(path_.string() + " line 3"), std::string::npos) << scan.error().message();
  // recover_results refuses it the same way and leaves the file as it was.
  const std::string before = text();
  EXPECT_FALSE(recover_results(path_, nullptr));
  EXPECT_EQ(text(), before);
  // A record with a field of the wrong type is no crash either.
  write(line(0) + R"({"run_id": 5, "name": [], "seed": "x", "outcome": {}})" "\n" + line(2));
  auto typed = scan_results(path_, nullptr);
  ASSERT_FALSE(typed);
  EXPECT_NE(typed.error().message().find("line 2"), std::string::npos);
}

TEST_F(results_file_test, recover_cuts_off_a_torn_last_line) {
  const std::string torn = line(7);
  write(line(5) + line(6) + torn.substr(0, torn.size() / 2));
  std::vector<std::uint64_t> runs;
  auto scan = recover_results(path_, [&](run_record&& r, std::uint64_t) {
    runs.push_back(r.run);
    return core::status();
  });
  ASSERT_TRUE(scan) << scan.error().message();
  EXPECT_TRUE(scan->truncated_tail);
  EXPECT_EQ(scan->torn_bytes, torn.size() / 2);
  EXPECT_EQ(runs, (std::vector<std::uint64_t>{5, 6}));
  EXPECT_EQ(text(), line(5) + line(6));
  // Appending now gives a valid file.
  {
    results_writer w;
    ASSERT_TRUE(w.open(path_));
    ASSERT_TRUE(w.append(sample(7)));
  }
  auto all = read_results(path_);
  ASSERT_TRUE(all) << all.error().message();
  EXPECT_EQ(all->records.size(), 3u);
  EXPECT_FALSE(all->truncated_tail);
}

TEST_F(results_file_test, recover_ends_a_complete_unterminated_last_line) {
  const std::string last = line(1);
  write(line(0) + last.substr(0, last.size() - 1));  // whole record, newline lost
  auto scan = recover_results(path_, nullptr);
  ASSERT_TRUE(scan) << scan.error().message();
  EXPECT_FALSE(scan->truncated_tail);
  EXPECT_EQ(scan->records, 2u);
  EXPECT_EQ(text(), line(0) + line(1));
}

TEST(read_results, reports_a_missing_file_as_not_found) {
  auto r = read_results("/nonexistent/faultline/results.jsonl");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.code(), core::errc::not_found);
}

}  // namespace
}  // namespace faultline::harness
