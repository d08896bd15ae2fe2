// The nccl/ points of the preloaded agent (nccl_points.h) and the rank state they keep
// (nccl_state.h), on a real two-rank NCCL program (testing/nccl_allreduce.cc) run against the
// stand-in libnccl.so.2 (testing/fake_libnccl.cc): linked, and dlopen()ed. Then the distributed
// verdict of `faultline exec` on a four-rank FSDP-like program on streams (testing/nccl_steps.cc,
// the stand-in driver's streams: a collective is enqueued and completes only once every rank has
// reached it): the first collective some rank never issued or no rank completed, a desync, the
// phase, and the cause of each action in the ranks' words.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "faults/preload/nccl_state.h"
#include "faults/preload/testing/preload_run.h"

namespace faultline::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::finished;

const std::string program = FAULTLINE_NCCL_PROGRAM;
const std::string program_dlopen = FAULTLINE_NCCL_PROGRAM_DLOPEN;
const std::string program_local = FAULTLINE_NCCL_PROGRAM_LOCAL;
const std::string fake_dir = FAULTLINE_FAKE_LIBNCCL_DIR;
const std::string cli = FAULTLINE_CLI;
const std::string steps_program = FAULTLINE_NCCL_STEPS;
const std::string fake_cuda_dir = FAULTLINE_FAKE_LIBCUDA_DIR;

std::uint32_t id(nccl_api a) { return static_cast<std::uint32_t>(a); }

class nccl_points : public ::testing::Test {
 protected:
  std::vector<std::string> env(std::uint64_t seed = 1) const {
    return {"LD_LIBRARY_PATH=" + fake_dir, "FAULTLINE_SEED=" + std::to_string(seed)};
  }

  finished run(const std::string& spec, const std::string& which = program, std::uint64_t seed = 1) {
    return runner_.run(spec, {which, "--nranks", "2", "--iters", "5", "--count", "64"}, env(seed));
  }

  // Every nccl.PID of the run directory, by rank.
  std::map<int, nccl_rank_state> states() const {
    std::map<int, nccl_rank_state> out;
    for (const auto& e : fs::directory_iterator(runner_.dir())) {
      if (e.path().filename().string().rfind(nccl_file_prefix, 0) != 0) continue;
      nccl_rank_state s{};
      std::ifstream in(e.path(), std::ios::binary);
      in.read(reinterpret_cast<char*>(&s), sizeof s);
      EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(sizeof s)) << e.path();
      EXPECT_TRUE(nccl_state_valid(s)) << e.path();
      EXPECT_EQ(e.path().filename().string(), nccl_file_prefix + std::to_string(s.pid));
      out[s.rank] = s;
    }
    return out;
  }

  testing::preload_runner runner_{FAULTLINE_AGENT_PRELOAD};
};

TEST_F(nccl_points, without_an_item_every_rank_keeps_its_state_and_the_program_passes) {
  const finished f = run("");
  ASSERT_TRUE(testing::exited_0(f)) << f.err;
  EXPECT_EQ(testing::count(f.out, "5 allreduces of 64 floats OK"), 2u) << f.out;
  const auto s = states();
  ASSERT_EQ(s.size(), 2u);
  for (int rank : {0, 1}) {
    const nccl_rank_state& r = s.at(rank);
    EXPECT_EQ(r.nranks, 2);
    EXPECT_EQ(r.local_rank, rank);
    EXPECT_EQ(r.comms, 1u);
    EXPECT_EQ(r.collectives, 5u);
    EXPECT_EQ(r.last_collective, id(nccl_api::all_reduce));
    EXPECT_EQ(r.in_call, 0u);
    EXPECT_EQ(r.calls[id(nccl_api::all_reduce)], 5u);
    EXPECT_EQ(r.calls[id(nccl_api::comm_init_rank)], 1u);
    EXPECT_EQ(r.calls[id(nccl_api::comm_destroy)], 1u);
    EXPECT_EQ(r.fault_action, static_cast<std::uint32_t>(nccl_fault_action::none));
  }
}

TEST_F(nccl_points, a_failed_init_on_rank_0_takes_the_programs_own_error_path) {
  const finished f = run("nccl/ncclCommInitRank@rank=0=fail(ncclSystemError)");
  ASSERT_TRUE(WIFEXITED(f.status)) << f.err;
  EXPECT_EQ(WEXITSTATUS(f.status), 1);
  EXPECT_NE(f.err.find("rank 0: ncclCommInitRank failed: unhandled system error"), std::string::npos) << f.err;
  const auto s = states();
  ASSERT_EQ(s.count(0), 1u);
  EXPECT_EQ(s.at(0).fault_action, static_cast<std::uint32_t>(nccl_fault_action::failed));
  EXPECT_EQ(s.at(0).fault_api, id(nccl_api::comm_init_rank));
  EXPECT_EQ(s.at(0).fault_result, 2);
  EXPECT_EQ(s.at(0).comms, 0u);
  if (s.count(1) != 0) {
    EXPECT_EQ(s.at(1).fault_action, static_cast<std::uint32_t>(nccl_fault_action::none));
  }
  const std::vector<std::string> reached = runner_.all_reached();
  EXPECT_NE(std::find(reached.begin(), reached.end(), "nccl/ncclCommInitRank@rank=0"), reached.end());
}

TEST_F(nccl_points, a_rank_killed_before_its_fifth_allreduce_is_recorded_before_it_dies) {
  const finished f = run("nccl/ncclAllReduce@rank=1=4*off->kill");
  ASSERT_TRUE(WIFEXITED(f.status));
  EXPECT_EQ(WEXITSTATUS(f.status), 1);
  EXPECT_NE(f.err.find("rank 1 (pid"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("killed by signal 9"), std::string::npos) << f.err;
  const auto s = states();
  ASSERT_EQ(s.size(), 2u);
  const nccl_rank_state& killed = s.at(1);
  EXPECT_EQ(killed.fault_action, static_cast<std::uint32_t>(nccl_fault_action::killed));
  EXPECT_EQ(killed.fault_signal, SIGKILL);
  EXPECT_EQ(killed.fault_api, id(nccl_api::all_reduce));
  EXPECT_EQ(killed.fault_call, 5u);
  EXPECT_EQ(killed.collectives, 4u);
  EXPECT_EQ(s.at(0).fault_action, static_cast<std::uint32_t>(nccl_fault_action::none));
}

// The hang the points exist for: rank 1 stops before its third allreduce; rank 0 is left inside
// its third, for ever.
TEST_F(nccl_points, a_rank_stopped_before_its_third_allreduce_leaves_the_other_inside_it) {
  finished f = runner_.start("nccl/ncclAllReduce@rank=1=2*off->stop",
                             {program, "--nranks", "2", "--iters", "5", "--count", "64"}, env());
  ASSERT_GT(f.pid, 0);
  std::map<int, nccl_rank_state> s;
  for (auto until = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(50ms);
    s = states();
    if (s.size() == 2 && s[1].fault_action != 0 && s[0].in_call != 0) break;
  }
  for (const auto& [rank, r] : s) ::kill(r.pid, SIGKILL);
  ::kill(f.pid, SIGKILL);
  ::waitpid(f.pid, &f.status, 0);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].fault_action, static_cast<std::uint32_t>(nccl_fault_action::stopped));
  EXPECT_EQ(s[1].fault_signal, SIGSTOP);
  EXPECT_EQ(s[1].fault_call, 3u);
  EXPECT_EQ(s[1].collectives, 2u);
  EXPECT_EQ(s[1].in_call, 0u);
  EXPECT_EQ(s[0].collectives, 3u);
  EXPECT_EQ(s[0].in_call, id(nccl_api::all_reduce));
  EXPECT_EQ(s[0].fault_action, 0u);
}

TEST_F(nccl_points, a_program_that_dlopens_libnccl_is_reached_through_dlsym) {
  const finished f = run("nccl/ncclAllReduce@rank=1=2*off->fail(ncclInternalError)", program_dlopen);
  ASSERT_TRUE(WIFEXITED(f.status));
  EXPECT_EQ(WEXITSTATUS(f.status), 1);
  EXPECT_NE(f.err.find("rank 1: ncclAllReduce failed: internal error"), std::string::npos) << f.err;
  const auto s = states();
  ASSERT_EQ(s.count(1), 1u);
  EXPECT_EQ(s.at(1).fault_call, 3u);
  EXPECT_EQ(s.at(1).fault_result, 3);
  EXPECT_EQ(s.at(1).collectives, 2u);

  const finished clean = run("", program_dlopen);
  EXPECT_TRUE(testing::exited_0(clean)) << clean.err;
}

// libnccl loaded as the dependency of a library dlopen()ed RTLD_LOCAL (libtorch_cuda.so under
// Python): its callers still reach the agent, and the agent still finds libnccl's functions.
TEST_F(nccl_points, a_libnccl_outside_the_global_scope_is_reached_and_found) {
  const finished clean = run("", program_local);
  ASSERT_TRUE(testing::exited_0(clean)) << clean.err;
  auto s = states();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s.at(1).collectives, 5u);
  const finished f = run("nccl/ncclAllReduce@rank=1=2*off->fail(ncclInternalError)", program_local);
  EXPECT_EQ(WEXITSTATUS(f.status), 1);
  EXPECT_NE(f.err.find("rank 1: ncclAllReduce failed: internal error"), std::string::npos) << f.err;
}

TEST_F(nccl_points, without_a_rank_filter_an_item_acts_in_every_rank) {
  const finished f = run("nccl/ncclAllReduce=2*off->1*delay(1ms)");
  ASSERT_TRUE(testing::exited_0(f)) << f.err;
  const auto s = states();
  ASSERT_EQ(s.size(), 2u);
  for (const auto& [rank, r] : s) {
    EXPECT_EQ(r.fault_action, static_cast<std::uint32_t>(nccl_fault_action::delayed)) << "rank " << rank;
    EXPECT_EQ(r.fault_call, 3u) << "rank " << rank;
  }
}

// A probability draws from the run's seed: the same seed fails the same calls.
TEST_F(nccl_points, a_probability_draws_from_the_seed) {
  auto fault_calls = [&](std::uint64_t seed) {
    (void)run("nccl/ncclAllReduce@rank=0=40%fail(ncclRemoteError)", program, seed);
    const auto s = states();
    const std::uint32_t call = s.count(0) != 0 ? s.at(0).fault_call : 0;
    for (const auto& e : fs::directory_iterator(runner_.dir())) {
      if (e.path().filename().string().rfind(nccl_file_prefix, 0) == 0) fs::remove(e.path());
    }
    return call;
  };
  std::vector<std::uint32_t> first, second;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) first.push_back(fault_calls(seed));
  for (std::uint64_t seed = 1; seed <= 6; ++seed) second.push_back(fault_calls(seed));
  EXPECT_EQ(first, second);
  EXPECT_NE(std::count(first.begin(), first.end(), first.front()), 6) << "every seed drew alike";
}

// A directory of this test's own (mkdtemp), removed with what it holds: two copies of the suite
// run at once must not share an --out ("in use by another campaign").
class own_dir {
 public:
  own_dir() {
    std::string pattern = ::testing::TempDir() + "/fl-nccl-test-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
    EXPECT_FALSE(path_.empty()) << "mkdtemp " << pattern << ": " << std::strerror(errno);
  }
  ~own_dir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  own_dir(const own_dir&) = delete;
  own_dir& operator=(const own_dir&) = delete;
  [[nodiscard]] std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Through `faultline exec`: the runner reads the ranks' states into the run's verdict.
std::string exec_campaign(const std::string& spec, const std::string& timeout, const std::string& out_dir) {
  const std::string command = cli + " exec -n 1 --timeout " + timeout + " --replace -o " + out_dir +
                              " --env LD_LIBRARY_PATH=" + fake_dir + " --faults '" + spec + "' -- " + program +
                              " --iters 5 --count 64 2>&1";
  FILE* p = ::popen(command.c_str(), "r");
  std::string text;
  char buffer[512];
  while (p != nullptr && std::fgets(buffer, sizeof buffer, p) != nullptr) text += buffer;
  if (p != nullptr) ::pclose(p);
  return text;
}

TEST(nccl_points_exec, a_stopped_rank_makes_a_hang_that_names_it) {
  const own_dir dir;
  const std::string out_dir = dir.sub("out");
  const std::string text = exec_campaign("nccl/ncclAllReduce@rank=1=2*off->stop", "3s", out_dir);
  EXPECT_NE(text.find("hang: rank 1 outside ncclAllReduce #3 (stopped by nccl/ncclAllReduce), rank 0 waiting in it"),
            std::string::npos) << text;
  const std::string results = testing::slurp(out_dir + "/results.jsonl");
  EXPECT_NE(results.find("\"outcome\":\"hang\""), std::string::npos) << results;
  EXPECT_NE(results.find("\"state\":\"in-collective\""), std::string::npos) << results;
  EXPECT_NE(results.find("\"state\":\"outside\""), std::string::npos) << results;
}

TEST(nccl_points_exec, a_killed_rank_is_named_with_its_signal_and_the_other_where_it_was) {
  const own_dir dir;
  const std::string out_dir = dir.sub("out");
  const std::string text = exec_campaign("nccl/ncclAllReduce@rank=1=4*off->kill", "20s", out_dir);
  EXPECT_NE(text.find("1 dead (SIGKILL at nccl/ncclAllReduce #5)"), std::string::npos) << text;
  // Rank 0 is ended once rank 1 is gone: inside the collective rank 1 died at (#5), or still inside
  // the one before (#4), which it had not yet returned from. Both are where it was; the hunt saw
  // #4 in 2 of 30 runs at --jobs 2, which a test of #5 alone failed.
  const bool at_5 = text.find("0 dead (gone inside ncclAllReduce #5)") != std::string::npos;
  const bool at_4 = text.find("0 dead (gone inside ncclAllReduce #4)") != std::string::npos;
  EXPECT_TRUE(at_5 || at_4) << text;
}

// One run of fl_nccl_steps ARGS under `faultline exec` with `spec`; its summary and its record.
struct steps_run {
  std::string text;     // the command's output (summary)
  std::string results;  // results.jsonl
};
steps_run exec_steps(const own_dir& dir, const std::string& spec, const std::string& timeout, const std::string& args) {
  const std::string out_dir = dir.sub("out");
  const std::string command = cli + " exec -n 1 --timeout " + timeout + " --replace -o " + out_dir +
                              " --env LD_LIBRARY_PATH=" + fake_dir + ":" + fake_cuda_dir +
                              (spec.empty() ? "" : " --faults '" + spec + "'") + " -- " + steps_program + " " + args + " 2>&1";
  steps_run r;
  FILE* p = ::popen(command.c_str(), "r");
  char buffer[512];
  while (p != nullptr && std::fgets(buffer, sizeof buffer, p) != nullptr) r.text += buffer;
  if (p != nullptr) ::pclose(p);
  r.results = testing::slurp(out_dir + "/results.jsonl");
  return r;
}

// Rank 2 is stopped before its 4th all-gather, collective #8. The others issue #8 and #9 on their
// streams and wait in cuStreamSynchronize: #8 is the first collective rank 2 never issued, and the
// one they wait for, though #9 is the last they issued.
TEST(nccl_steps_exec, a_stopped_rank_is_named_at_the_first_collective_it_never_issued) {
  const own_dir dir;
  const steps_run r = exec_steps(dir, "nccl/ncclAllGather@rank=2=3*off->stop", "3s", "--nranks 4 --steps 6");
  EXPECT_NE(r.text.find("hang/run  hang: rank 2 outside ncclAllGather #8 (stopped by nccl/ncclAllGather), "
                        "ranks 0,1,3 waiting in it"),
            std::string::npos)
      << r.text;
  // Issued but not completed, against never issued.
  EXPECT_NE(r.text.find("0 in ncclAllGather #8 (waiting), issued 9 collectives, last ncclReduceScatter"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("2 outside: 7 collectives, last ncclBroadcast, stopped by nccl/ncclAllGather before call #4"),
            std::string::npos)
      << r.text;
  EXPECT_NE(r.results.find("\"front\":{\"call\":\"ncclAllGather(count 64, float32)\",\"desync\":false,\"seq\":8}"),
            std::string::npos)
      << r.results;
  EXPECT_NE(r.results.find("\"completed\":7"), std::string::npos) << r.results;
}

// The same with each step's collectives in a group: NCCL enqueues them at ncclGroupEnd, so an
// event recorded right after each call would mark the stream before their work and count them
// complete (completed 9). The agent records them after the group: completed 7.
TEST(nccl_steps_exec, collectives_in_a_group_are_complete_only_once_the_group_ran) {
  const own_dir dir;
  const steps_run r = exec_steps(dir, "nccl/ncclAllGather@rank=2=3*off->stop", "3s", "--nranks 4 --steps 6 --grouped");
  EXPECT_NE(r.text.find("hang: rank 2 outside ncclAllGather #8 (stopped by nccl/ncclAllGather), ranks 0,1,3 waiting in it"),
            std::string::npos)
      << r.text;
  EXPECT_GE(testing::count(r.results, "\"completed\":7"), 3u) << r.results;  // ranks 0, 1, 3 (and 2, if its last poll saw #7)
  EXPECT_EQ(r.results.find("\"completed\":9"), std::string::npos) << r.results;
}

// Rank 1 sleeps in the point's delay before its second broadcast, #14, past the run's timeout.
TEST(nccl_steps_exec, a_delayed_rank_is_named_asleep_in_the_points_delay) {
  const own_dir dir;
  const steps_run r = exec_steps(dir, "nccl/ncclBroadcast@rank=1=1*off->delay(60s)", "3s", "--nranks 4 --steps 6");
  EXPECT_NE(r.text.find("hang/run  hang: rank 1 outside ncclBroadcast #14 (asleep in delay(60s) of nccl/ncclBroadcast), "
                        "ranks 0,2,3 waiting in it"),
            std::string::npos)
      << r.text;
  EXPECT_NE(r.text.find("1 outside: 13 collectives, last ncclReduceScatter, asleep in delay(60s) of nccl/ncclBroadcast "
                        "before call #2"),
            std::string::npos)
      << r.text;
}

// No fault: rank 2 skips the broadcast of step 3. At #7 ranks 0, 1 and 3 issued ncclBroadcast and
// rank 2 the next step's ncclAllGather; the stand-in, as NCCL, hangs there.
TEST(nccl_steps_exec, a_planted_desync_is_named_with_both_sides) {
  const own_dir dir;
  const steps_run r = exec_steps(dir, "", "3s", "--nranks 4 --steps 6 --desync 2:3");
  EXPECT_NE(r.text.find("hang/run  hang: desync at #7: ranks 0,1,3 ncclBroadcast(count 64, float32, root 0), "
                        "rank 2 ncclAllGather(count 64, float32)"),
            std::string::npos)
      << r.text;
  EXPECT_NE(r.text.find("2 in #7 ncclAllGather(count 64, float32) (desync), issued 8 collectives, last ncclReduceScatter"),
            std::string::npos)
      << r.text;
}

// Every rank finished its steps and waits elsewhere: the runner's question at the deadline finds
// every collective complete (the last events completed after the ranks' last NCCL call), so the
// hang is not blamed on a collective.
TEST(nccl_steps_exec, ranks_asked_at_the_deadline_report_their_streams_complete) {
  const own_dir dir;
  const steps_run r = exec_steps(dir, "", "3s", "--nranks 2 --steps 2 --hold");
  EXPECT_NE(r.results.find("\"outcome\":\"hang\""), std::string::npos) << r.results;
  EXPECT_EQ(testing::count(r.results, "\"completed\":4"), 2u) << r.results;
  EXPECT_EQ(r.results.find("waiting in"), std::string::npos) << r.results;
  EXPECT_EQ(r.results.find("\"front\""), std::string::npos) << r.results;
}

// A failed init: the rank's line names the call, the item and the result, then how it ended.
TEST(nccl_steps_exec, a_failed_init_names_the_point_and_the_exit_in_the_ranks_line) {
  const own_dir dir;
  const steps_run r = exec_steps(dir, "nccl/ncclCommInitRank*@rank=1=fail(ncclSystemError)", "20s", "--nranks 2 --steps 2");
  EXPECT_NE(r.text.find("1 ncclCommInitRankConfig failed by nccl/ncclCommInitRank* (ncclSystemError) at call #1, "
                        "then exited 1 after 0 collectives"),
            std::string::npos)
      << r.text;
}

// The command refuses what the agent could not do, before anything runs.
TEST(nccl_points_cli, bad_items_are_refused_before_run_1) {
  struct refused {
    const char* spec;
    const char* says;
  };
  for (const refused& r : {refused{"nccl/ncclAllReduc=stop", "did you mean nccl/ncclAllReduce"},
                           refused{"nccl/ncclAllReduce@rank=x=stop", "expected a rank number after '@rank='"},
                           refused{"nccl/ncclAllReduce=fail(ncclBogus)", "ncclResult_t name"},
                           refused{"nccl/ncclAllReduce@python3=stop", "nccl/ (@rank=N)"},
                           refused{"process/start@rank=1=stop", "nccl/ (@rank=N)"},
                           refused{"nccl/ncclAllReduce=teardown(0)", "not teardown"}}) {
    const own_dir dir;
    const std::string out_dir = dir.sub("out");
    const std::string command = cli + " exec --faults '" + r.spec + "' --out " + out_dir + " -- true 2>&1";
    FILE* p = ::popen(command.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string text;
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, p) != nullptr) text += buffer;
    const int status = ::pclose(p);
    EXPECT_EQ(WEXITSTATUS(status), 2) << r.spec << ": " << text;
    EXPECT_NE(text.find(r.says), std::string::npos) << r.spec << ": " << text;
    EXPECT_FALSE(fs::exists(out_dir + "/results.jsonl")) << r.spec;
  }
}

}  // namespace
}  // namespace faultline::agent
