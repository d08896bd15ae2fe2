// The distributed verdict end to end, without NCCL or the agent: fl_nccl_ranks (testing/) forks
// two ranks that leave nccl.PID files as the agent would and hang; `faultline exec` must name
// them in its summary, its results.jsonl and the JUnit report made from it.
#include <gtest/gtest.h>

#include <string>

#include "harness/results/results.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using testing::program;
using testing::run_faultline;

class nccl_ranks_e2e : public ::testing::Test {
 protected:
  // One run of fl_nccl_ranks MODE under `faultline exec`, hung at 2 s; its record.
  run_record hang_of(const std::string& mode) {
    run = run_faultline({"exec", "--no-preload", "--timeout", "2s", "--out", out().string(), "--",
                         program("fl_nccl_ranks").string(), mode});
    EXPECT_NE(run.status, 0) << run.out << run.err;
    auto recs = testing::results_in(out());
    EXPECT_EQ(recs.size(), 1u) << run.out << run.err;
    return recs.empty() ? run_record{} : recs.front();
  }
  std::string junit() {
    auto r = run_faultline({"report", out().string(), "--junit", (dir_.path() / "junit.xml").string()});
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    return testing::slurp(dir_.path() / "junit.xml");
  }
  fs::path out() const { return dir_.path() / "out"; }
  testing::scratch_dir dir_;
  testing::command_result run;
};

TEST_F(nccl_ranks_e2e, a_rank_stopped_before_a_collective_is_named_outside_it_and_the_other_waiting_in_it) {
  const run_record rec = hang_of("stopped");
  EXPECT_EQ(rec.result, outcome::hang);
  const std::string signature = "hang: rank 1 outside ncclAllReduce #3 (stopped by nccl/ncclAllReduce), rank 0 waiting in it";
  EXPECT_EQ(rec.signature, signature);
  ASSERT_EQ(rec.ranks.size(), 2u);
  EXPECT_EQ(rec.ranks[0].rank, 0);
  EXPECT_EQ(rec.ranks[0].state, rank_state::in_collective);
  EXPECT_EQ(rec.ranks[0].last_collective, "ncclAllReduce");
  EXPECT_EQ(rec.ranks[0].collectives, 3u);
  EXPECT_EQ(rec.ranks[0].in_call, "ncclAllReduce");
  EXPECT_EQ(rec.ranks[1].rank, 1);
  EXPECT_EQ(rec.ranks[1].state, rank_state::outside);
  EXPECT_EQ(rec.ranks[1].collectives, 2u);
  EXPECT_EQ(rec.ranks[1].fault, "stopped");
  EXPECT_EQ(rec.ranks[1].fault_call, 3u);
  // Each rank's pid is the one its stacks are under in the run's stack dump.
  ASSERT_FALSE(rec.stacks.empty());
  const std::string stacks = testing::slurp(out() / rec.stacks);
  for (const auto& k : rec.ranks) EXPECT_NE(stacks.find("=== process " + std::to_string(k.pid) + " "), std::string::npos) << stacks;
  // The summary names the ranks.
  EXPECT_NE(run.out.find(signature), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("ranks: 1 outside: 2 collectives, last ncclAllReduce, stopped by nccl/ncclAllReduce before call #3; "
                         "0 in ncclAllReduce #3 (waiting)"),
            std::string::npos)
      << run.out;
  const std::string xml = junit();
  EXPECT_NE(xml.find("message=\"" ), std::string::npos);
  EXPECT_NE(xml.find("1x hang/run " + signature + "; ranks: 1 outside: 2 collectives"), std::string::npos) << xml;
  EXPECT_NE(xml.find("rank 0  pid " + std::to_string(rec.ranks[0].pid) + "  in-collective  in ncclAllReduce #3 (waiting)"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("rank 1  pid " + std::to_string(rec.ranks[1].pid) + "  outside"), std::string::npos) << xml;
}

TEST_F(nccl_ranks_e2e, a_rank_killed_before_a_collective_is_named_dead_by_its_signal) {
  const run_record rec = hang_of("killed");
  EXPECT_EQ(rec.result, outcome::hang);
  const std::string signature = "hang: rank 1 dead (SIGKILL at nccl/ncclAllReduce #5), rank 0 waiting in ncclAllReduce #5";
  EXPECT_EQ(rec.signature, signature);
  ASSERT_EQ(rec.ranks.size(), 2u);
  EXPECT_EQ(rec.ranks[0].state, rank_state::in_collective);
  EXPECT_EQ(rec.ranks[1].state, rank_state::dead);
  EXPECT_EQ(rec.ranks[1].signal, 9);
  EXPECT_NE(run.out.find("ranks: 1 dead (SIGKILL at nccl/ncclAllReduce #5); 0 in ncclAllReduce #5 (waiting)"), std::string::npos)
      << run.out;
  const std::string xml = junit();
  EXPECT_NE(xml.find(signature + "; ranks: 1 dead (SIGKILL at nccl/ncclAllReduce #5)"), std::string::npos) << xml;
}

TEST_F(nccl_ranks_e2e, a_run_without_nccl_has_no_ranks_in_its_record) {
  auto r = run_faultline({"exec", "--no-preload", "--out", out().string(), "--", program("fl_testdata_pass").string()});
  EXPECT_EQ(r.status, 0) << r.err;
  const std::string line = testing::slurp(out() / "results.jsonl");
  EXPECT_EQ(line.find("\"ranks\""), std::string::npos) << line;
}

}  // namespace
}  // namespace faultline::harness
