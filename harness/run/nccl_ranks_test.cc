// The distributed verdict: judging ranks from their nccl.PID states (nccl_ranks.h), reading the
// files robustly, the words of the verdict (results/ranks.h) and the ranks in results.jsonl.
#include "harness/run/nccl_ranks.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <fstream>

#include "harness/results/ranks.h"
#include "harness/results/summary.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using agent::nccl_api;
using agent::nccl_fault_action;
using agent::nccl_rank_state;

constexpr std::uint32_t id(nccl_api a) { return static_cast<std::uint32_t>(a); }

constexpr std::uint64_t comm_id = 0x5eed;

// Collective `seq` of a rank, on communicator comm_id, as the agent writes it into the ring.
void issue(nccl_rank_state& s, nccl_api api, std::uint64_t count = 64, int root = -1) {
  const std::uint32_t seq = ++s.collectives;
  auto& e = s.ring[seq % agent::nccl_ring_size];
  e.seq = seq;
  e.comm = comm_id;
  e.comm_seq = ++s.comm_table[0].collectives;
  e.api = id(api);
  e.count = count;
  e.datatype = 7;  // ncclFloat32
  e.root = root;
  e.op = api == nccl_api::all_reduce || api == nccl_api::reduce_scatter ? 0 : agent::nccl_no_op;
  s.last_collective = id(api);
  s.calls[id(api)]++;
}

// A rank as the agent leaves it after `collectives` all-reduces, none of them still running.
nccl_rank_file rank(pid_t pid, int r, std::uint32_t collectives, int nranks = 2) {
  nccl_rank_file f;
  f.pid = pid;
  nccl_rank_state& s = f.state;
  s.magic = agent::nccl_state_magic;
  s.version = agent::nccl_state_version;
  s.pid = pid;
  s.rank = r;
  s.nranks = nranks;
  s.local_rank = r;
  s.comms = 1;
  s.comm_count = 1;
  s.comm_table[0] = {comm_id, 0x1000, nranks, r, 0, 0};
  s.calls[id(nccl_api::comm_init_rank)] = 1;
  for (std::uint32_t i = 0; i < collectives; ++i) issue(s, nccl_api::all_reduce);
  return f;
}

// A rank that waits inside its last collective (the stand-in's null stream runs it in the call).
nccl_rank_file waiting(nccl_rank_file f) {
  f.state.in_call = f.state.last_collective;
  return f;
}

// A rank whose events say its stream completed `completed` of its collectives.
nccl_rank_file completed(nccl_rank_file f, std::uint32_t done) {
  f.state.completion_known = 1;
  f.state.completed = done;
  return f;
}

nccl_rank_file faulted(nccl_rank_file f, nccl_fault_action a, int sig) {
  f.state.fault_action = static_cast<std::uint32_t>(a);
  f.state.fault_api = id(nccl_api::all_reduce);
  f.state.fault_call = f.state.collectives + 1;
  f.state.fault_signal = sig;
  return f;
}

rank_fates hung(std::set<pid_t> alive) {
  rank_fates f;
  f.hang = true;
  f.alive = std::move(alive);
  return f;
}

TEST(judge_ranks, all_ranks_at_the_same_count_wait_in_that_collective) {
  auto ranks = judge_ranks({waiting(rank(100, 0, 3)), waiting(rank(101, 1, 3))}, hung({100, 101}));
  ASSERT_EQ(ranks.size(), 2u);
  for (const auto& r : ranks) {
    EXPECT_EQ(r.state, rank_state::in_collective);
    EXPECT_EQ(r.last_collective, "ncclAllReduce");
    EXPECT_EQ(r.collectives, 3u);
  }
  EXPECT_EQ(ranks_verdict(ranks), "ranks: 0 in ncclAllReduce #3 (waiting); 1 in ncclAllReduce #3 (waiting)");
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: ranks 0,1 waiting in ncclAllReduce #3");
}

TEST(judge_ranks, a_rank_behind_the_highest_count_is_outside_the_collective) {
  auto behind = rank(101, 1, 2);
  behind.state.in_call = id(nccl_api::all_gather);  // a collective of its own that nobody joins
  auto ranks = judge_ranks({waiting(rank(100, 0, 3)), behind}, hung({100, 101}));
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].state, rank_state::in_collective);
  EXPECT_EQ(ranks[1].state, rank_state::outside);
  EXPECT_EQ(ranks[1].in_call, "ncclAllGather");
  EXPECT_EQ(ranks_verdict(ranks),
            "ranks: 1 outside: 2 collectives, last ncclAllReduce, in ncclAllGather; 0 in ncclAllReduce #3 (waiting)");
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: rank 1 outside ncclAllReduce #3 (in ncclAllGather), rank 0 waiting in it");
}

TEST(judge_ranks, a_rank_a_point_stopped_is_outside_and_named_by_its_point) {
  auto ranks = judge_ranks({waiting(rank(100, 0, 3)), faulted(rank(101, 1, 2), nccl_fault_action::stopped, SIGSTOP)}, hung({100, 101}));
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1].state, rank_state::outside);
  EXPECT_EQ(ranks[1].fault, "stopped");
  EXPECT_EQ(ranks[1].fault_api, "ncclAllReduce");
  EXPECT_EQ(ranks[1].fault_call, 3u);
  EXPECT_EQ(ranks[1].signal, SIGSTOP);
  EXPECT_EQ(ranks_verdict(ranks),
            "ranks: 1 outside: 2 collectives, last ncclAllReduce, stopped by nccl/ncclAllReduce before call #3; "
            "0 in ncclAllReduce #3 (waiting)");
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: rank 1 outside ncclAllReduce #3 (stopped by nccl/ncclAllReduce), rank 0 waiting in it");
}

TEST(judge_ranks, a_stopped_rank_never_issued_the_collective_it_was_stopped_before) {
  // Rank 1 completed #3 with rank 0 and was stopped before its 4th: rank 0 waits in #4 alone.
  auto ranks = judge_ranks({waiting(rank(100, 0, 4)), faulted(rank(101, 1, 3), nccl_fault_action::stopped, SIGSTOP)}, hung({100, 101}));
  EXPECT_EQ(ranks[0].state, rank_state::in_collective);
  EXPECT_EQ(ranks[0].front, 4u);
  EXPECT_EQ(ranks[1].state, rank_state::outside);
  EXPECT_EQ(ranks[1].front_call, "");
}

// The issue's case on streams: rank 2 was stopped before its 8th collective; the others issued
// #8 and #9 and wait for their streams, whose events say #7 completed. The collective they wait
// for is #8, not #9, the last they issued.
TEST(judge_ranks, the_front_is_the_first_collective_a_rank_never_issued_not_the_last_issued) {
  std::vector<nccl_rank_file> files;
  for (int r = 0; r < 4; ++r) {
    auto f = rank(100 + r, r, 0, 4);
    for (int step = 1; step <= 3; ++step) {
      issue(f.state, nccl_api::all_gather);
      issue(f.state, nccl_api::reduce_scatter);
    }
    issue(f.state, nccl_api::broadcast, 64, 0);  // #7
    if (r != 2) {
      issue(f.state, nccl_api::all_gather);       // #8
      issue(f.state, nccl_api::reduce_scatter);   // #9
      f = completed(f, 7);
    } else {
      f = completed(faulted(f, nccl_fault_action::stopped, SIGSTOP), 5);  // stopped: its last answer is old
      f.state.fault_api = id(nccl_api::all_gather);
      f.state.fault_call = 4;
    }
    files.push_back(f);
  }
  auto ranks = judge_ranks(files, hung({100, 101, 102, 103}));
  ASSERT_EQ(ranks.size(), 4u);
  for (const auto& r : ranks) EXPECT_EQ(r.front, 8u);
  EXPECT_EQ(ranks[0].state, rank_state::in_collective);
  EXPECT_EQ(ranks[0].front_call, "ncclAllGather(count 64, float32)");
  EXPECT_EQ(ranks[0].completed, 7u);
  EXPECT_EQ(ranks[2].state, rank_state::outside);
  EXPECT_EQ(ranks_hang_signature(ranks),
            "hang: rank 2 outside ncclAllGather #8 (stopped by nccl/ncclAllGather), ranks 0,1,3 waiting in it");
  EXPECT_EQ(rank_detail(ranks[0]), "in ncclAllGather #8 (waiting), issued 9 collectives, last ncclReduceScatter");
}

TEST(judge_ranks, a_collective_every_rank_issued_and_none_completed_is_the_front) {
  auto a = completed(rank(100, 0, 5), 3), b = completed(rank(101, 1, 5), 3);
  auto ranks = judge_ranks({a, b}, hung({100, 101}));
  EXPECT_EQ(ranks[0].front, 4u);
  EXPECT_EQ(ranks[0].state, rank_state::in_collective);
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: ranks 0,1 waiting in ncclAllReduce #4");
  // One rank's event that completed speaks for the other (a collective completes on all or none).
  ranks = judge_ranks({completed(rank(100, 0, 5), 5), completed(rank(101, 1, 5), 3)}, hung({100, 101}));
  EXPECT_EQ(ranks[0].front, 0u);
  EXPECT_EQ(ranks_hang_signature(ranks), "");
}

TEST(judge_ranks, ranks_that_issued_different_collectives_under_one_number_are_a_desync) {
  std::vector<nccl_rank_file> files;
  for (int r = 0; r < 4; ++r) {
    auto f = rank(100 + r, r, 2, 4);
    if (r == 2) issue(f.state, nccl_api::all_gather, 256);
    else issue(f.state, nccl_api::broadcast, 1024, 0);
    files.push_back(completed(f, 2));
  }
  auto ranks = judge_ranks(files, hung({100, 101, 102, 103}));
  for (const auto& r : ranks) {
    EXPECT_TRUE(r.desync);
    EXPECT_EQ(r.front, 3u);
    EXPECT_EQ(r.state, rank_state::in_collective);
  }
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: desync at #3: ranks 0,1,3 ncclBroadcast(count 1024, float32, root 0), "
                                         "rank 2 ncclAllGather(count 256, float32)");
  EXPECT_EQ(rank_detail(ranks[2]), "in #3 ncclAllGather(count 256, float32) (desync)");
  // A different count alone is a desync too.
  files[2] = completed(rank(102, 2, 2, 4), 2);
  issue(files[2].state, nccl_api::broadcast, 512, 0);
  EXPECT_EQ(ranks_hang_signature(judge_ranks(files, hung({100, 101, 102, 103}))),
            "hang: desync at #3: ranks 0,1,3 ncclBroadcast(count 1024, float32, root 0), rank 2 ncclBroadcast(count 512, "
            "float32, root 0)");
}

TEST(judge_ranks, a_rank_asleep_in_a_delay_is_named_with_its_point_and_duration) {
  auto slow = faulted(rank(101, 1, 9, 2), nccl_fault_action::delayed, 0);
  slow.state.fault_api = id(nccl_api::broadcast);
  slow.state.fault_call = 2;
  slow.state.fault_delay_ns = 120'000'000'000ull;
  slow.state.fault_active = 1;
  std::strcpy(slow.state.fault_item, "nccl/ncclBroadcast@rank=1");
  auto fast = rank(100, 0, 9, 2);
  issue(fast.state, nccl_api::broadcast, 64, 0);
  auto ranks = judge_ranks({completed(fast, 9), completed(slow, 9)}, hung({100, 101}));
  EXPECT_EQ(ranks[1].fault_item, "nccl/ncclBroadcast");
  EXPECT_EQ(ranks[1].fault_delay_ms, 120000u);
  EXPECT_EQ(ranks_hang_signature(ranks),
            "hang: rank 1 outside ncclBroadcast #10 (asleep in delay(120s) of nccl/ncclBroadcast), rank 0 waiting in it");
  EXPECT_EQ(rank_detail(ranks[1]),
            "outside: 9 collectives, last ncclAllReduce, asleep in delay(120s) of nccl/ncclBroadcast before call #2");
  // Once awake, the delay is history: "delayed by".
  ranks[1].fault_active = false;
  EXPECT_EQ(rank_detail(ranks[1]), "outside: 9 collectives, last ncclAllReduce, delayed by delay(120s) of nccl/ncclBroadcast at call #2");
}

TEST(judge_ranks, a_rank_whose_call_a_point_failed_names_it_then_how_it_ended) {
  auto failed = rank(101, 1, 0, 2);
  failed.state.fault_action = static_cast<std::uint32_t>(nccl_fault_action::failed);
  failed.state.fault_api = id(nccl_api::comm_init_rank_config);
  failed.state.fault_call = 1;
  failed.state.fault_result = 2;
  std::strcpy(failed.state.fault_item, "nccl/ncclCommInitRank*@rank=1");
  failed.state.exited = 1;
  failed.state.exit_code = 1;
  auto init = rank(100, 0, 0, 2);
  init.state.in_call = id(nccl_api::comm_init_rank_config);
  auto ranks = judge_ranks({init, failed}, rank_fates{});
  EXPECT_EQ(ranks[1].state, rank_state::exited);
  EXPECT_EQ(ranks[1].exit_code, 1);
  EXPECT_EQ(ranks_verdict(ranks), "ranks: 0 dead (gone inside ncclCommInitRankConfig) after 0 collectives; "
                                  "1 ncclCommInitRankConfig failed by nccl/ncclCommInitRank* (ncclSystemError) at call #1, "
                                  "then exited 1 after 0 collectives");
}

TEST(judge_ranks, a_rank_far_behind_is_named_at_its_next_collective_past_the_ring) {
  auto ahead = completed(rank(100, 0, 600), 599), behind = completed(rank(101, 1, 10), 10);
  auto ranks = judge_ranks({waiting(ahead), behind}, hung({100, 101}));
  EXPECT_EQ(ranks[0].front, 11u);
  EXPECT_EQ(ranks[0].state, rank_state::in_collective);
  EXPECT_EQ(ranks[0].front_call, "");  // #11 left rank 0's ring long ago
  EXPECT_EQ(ranks[1].state, rank_state::outside);
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: rank 1 outside #11 (10 collectives), rank 0 waiting in it");
}

TEST(judge_ranks, a_dead_rank_is_named_with_the_signal_its_point_sent) {
  auto ranks = judge_ranks({waiting(rank(100, 0, 5)), faulted(rank(101, 1, 4), nccl_fault_action::killed, SIGKILL)}, hung({100}));
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1].state, rank_state::dead);
  EXPECT_EQ(ranks[1].signal, SIGKILL);
  EXPECT_EQ(ranks_verdict(ranks), "ranks: 1 dead (SIGKILL at nccl/ncclAllReduce #5); 0 in ncclAllReduce #5 (waiting)");
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: rank 1 dead (SIGKILL at nccl/ncclAllReduce #5), rank 0 waiting in ncclAllReduce #5");
}

TEST(judge_ranks, a_dead_rank_without_a_point_takes_the_reaped_signal_or_is_gone) {
  rank_fates f = hung({100});
  f.wait_status[101] = SIGSEGV;  // a waitpid status: killed by SIGSEGV
  auto ranks = judge_ranks({waiting(rank(100, 0, 5)), rank(101, 1, 4), rank(102, 2, 4, 3)}, f);
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[1].state, rank_state::dead);
  EXPECT_EQ(ranks[1].signal, SIGSEGV);
  EXPECT_EQ(ranks[2].state, rank_state::dead);
  EXPECT_FALSE(ranks[2].signal);
  EXPECT_EQ(ranks_verdict(ranks),
            "ranks: 1 dead (SIGSEGV) after 4 collectives; 2 dead (gone) after 4 collectives; 0 in ncclAllReduce #5 (waiting)");
}

TEST(judge_ranks, a_rank_stuck_in_an_init_while_others_are_past_it_is_outside) {
  auto init = rank(101, 1, 0);
  init.state.comms = 0;
  init.state.in_call = id(nccl_api::comm_init_rank);
  auto ranks = judge_ranks({waiting(rank(100, 0, 1)), init}, hung({100, 101}));
  EXPECT_EQ(ranks[1].state, rank_state::outside);
  EXPECT_EQ(ranks_verdict(ranks), "ranks: 1 outside: 0 collectives, in ncclCommInitRank; 0 in ncclAllReduce #1 (waiting)");
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: rank 1 outside ncclAllReduce #1 (in ncclCommInitRank), rank 0 waiting in it");
}

TEST(judge_ranks, a_rank_with_no_state_is_missing_and_a_process_with_no_rank_is_named_by_pid) {
  auto unknown = rank(105, -1, 1);
  unknown.state.nranks = -1;
  auto ranks = judge_ranks({waiting(rank(100, 0, 2, 3)), unknown}, hung({100, 105}));
  ASSERT_EQ(ranks.size(), 4u);  // rank 0, the missing 1 and 2, then pid 105
  EXPECT_EQ(ranks[0].state, rank_state::in_collective);
  EXPECT_EQ(ranks[1].rank, 1);
  EXPECT_EQ(ranks[1].state, rank_state::missing);
  EXPECT_EQ(ranks[1].pid, 0);
  EXPECT_EQ(ranks[2].state, rank_state::missing);
  EXPECT_EQ(ranks[3].rank, -1);
  EXPECT_EQ(ranks[3].state, rank_state::outside);
  EXPECT_EQ(ranks_verdict(ranks), "ranks: pid 105 outside: 1 collective, last ncclAllReduce; 1 no state; 2 no state; "
                                  "0 in ncclAllReduce #2 (waiting)");
}

TEST(judge_ranks, ranks_at_different_counts_wait_at_the_first_collective_one_never_issued) {
  // Ranks 0 and 2 issued 7, rank 3 issued 6, rank 1 only 5: #6 is the one that cannot complete,
  // and ranks 0, 2 and 3 issued it. (The old verdict named #7, the highest count.)
  auto ranks = judge_ranks({waiting(rank(100, 0, 7, 4)), rank(101, 1, 5, 4), waiting(rank(102, 2, 7, 4)), rank(103, 3, 6, 4)}, hung({100, 101, 102, 103}));
  ASSERT_EQ(ranks.size(), 4u);
  EXPECT_EQ(ranks[0].state, rank_state::in_collective);
  EXPECT_EQ(ranks[1].state, rank_state::outside);
  EXPECT_EQ(ranks[2].state, rank_state::in_collective);
  EXPECT_EQ(ranks[3].state, rank_state::in_collective);
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: rank 1 outside ncclAllReduce #6 (5 collectives), ranks 0,2,3 waiting in it");
}

TEST(judge_ranks, ranks_hung_in_their_init_before_any_collective_are_all_outside) {
  auto a = rank(100, 0, 0), b = rank(101, 1, 0);
  a.state.in_call = b.state.in_call = id(nccl_api::comm_init_rank);
  auto ranks = judge_ranks({a, b}, hung({100, 101}));
  EXPECT_EQ(ranks[0].state, rank_state::outside);
  EXPECT_EQ(ranks_hang_signature(ranks), "hang: ranks 0,1 outside (in ncclCommInitRank)");
}

TEST(judge_ranks, a_hang_after_every_rank_ended_is_not_signed_by_the_ranks) {
  rank_fates f = hung({});  // only the launcher was left, hung elsewhere
  f.wait_status[100] = 0;
  f.wait_status[101] = 0;
  auto ranks = judge_ranks({rank(100, 0, 4), rank(101, 1, 4)}, f);
  EXPECT_EQ(ranks[0].state, rank_state::exited);
  EXPECT_EQ(ranks_hang_signature(ranks), "");
  EXPECT_EQ(ranks_verdict(ranks), "ranks: 0 exited after 4 collectives; 1 exited after 4 collectives");
}

TEST(judge_ranks, after_a_normal_end_ranks_exited_and_the_leaders_status_says_how) {
  rank_fates f;
  f.wait_status[100] = 0;        // exited 0
  f.wait_status[101] = SIGABRT;  // killed by SIGABRT
  f.host_pid[101] = 9101;        // in a PID namespace: stacks.txt names it 9101
  auto ranks = judge_ranks({rank(100, 0, 2), rank(101, 1, 2)}, f);
  EXPECT_EQ(ranks[0].state, rank_state::exited);
  EXPECT_EQ(ranks[1].state, rank_state::dead);
  EXPECT_EQ(ranks[1].signal, SIGABRT);
  EXPECT_EQ(ranks[1].pid, 9101);
}

class nccl_files : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& text) { write(name, text.data(), text.size()); }
  void write(const std::string& name, const void* data, std::size_t n) {
    std::ofstream(dir_.path() / name, std::ios::binary).write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  }
  testing::scratch_dir dir_;
};

TEST_F(nccl_files, only_whole_finished_states_of_this_layout_are_read) {
  const auto good = rank(4242, 1, 3).state;
  write("nccl.4242", &good, sizeof good);
  write("nccl.4243", &good, sizeof good / 2);  // truncated
  auto longer = std::string(reinterpret_cast<const char*>(&good), sizeof good) + "x";
  write("nccl.4244", longer.data(), longer.size());  // another layout
  auto bad_magic = good;
  bad_magic.magic = 0;  // not filled in yet
  write("nccl.4245", &bad_magic, sizeof bad_magic);
  auto bad_version = good;
  bad_version.version = 99;
  write("nccl.4246", &bad_version, sizeof bad_version);
  write("nccl.4247", "", 0);
  std::string garbage(sizeof good, '\xff');
  write("nccl.4248", garbage.data(), garbage.size());
  write("nccl.x12", &good, sizeof good);  // not a pid
  write("nccl.", &good, sizeof good);
  fs::create_directory(dir_.path() / "nccl.4249");
  const auto files = read_nccl_ranks(dir_.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].pid, 4242);
  EXPECT_EQ(files[0].state.collectives, 3u);
  EXPECT_TRUE(read_nccl_ranks(dir_.path() / "absent").empty());
}

TEST_F(nccl_files, out_of_range_ids_in_a_valid_file_are_named_empty_not_read_past_the_table) {
  auto s = rank(7, 0, 2).state;
  s.last_collective = 999;
  s.in_call = 0xffffffffu;
  s.fault_action = 77;
  write("nccl.7", &s, sizeof s);
  auto ranks = judge_ranks(read_nccl_ranks(dir_.path()), hung({7}));
  ASSERT_EQ(ranks.size(), 2u);  // and the missing rank 1
  EXPECT_EQ(ranks[0].last_collective, "");
  EXPECT_EQ(ranks[0].in_call, "");
  EXPECT_EQ(ranks[0].fault, "");
}

TEST_F(nccl_files, a_rank_that_left_a_crash_report_is_dead_by_its_signal_after_the_run) {
  write("crash.101", "signal 11 SIGSEGV\nthread 101 worker\n");
  write("crash.102", "not a crash report\n");
  rank_fates f;
  f.wait_status[100] = 0;  // the leader exited 0; its status is not replaced
  write("crash.100", "signal 6 SIGABRT\n");
  add_crashed_ranks(dir_.path(), f);
  EXPECT_EQ(f.wait_status.at(100), 0);
  EXPECT_EQ(f.wait_status.at(101), SIGSEGV);
  EXPECT_FALSE(f.wait_status.count(102));
  auto ranks = judge_ranks({rank(100, 0, 2), rank(101, 1, 1)}, f);
  EXPECT_EQ(ranks[0].state, rank_state::exited);
  EXPECT_EQ(ranks[1].state, rank_state::dead);
  EXPECT_EQ(ranks_verdict(ranks), "ranks: 1 dead (SIGSEGV) after 1 collective; 0 exited after 2 collectives");
}

TEST(run_record_ranks, round_trip_and_are_left_out_when_none) {
  run_record a;
  a.run_id = "ddp.s1";
  a.name = "ddp";
  a.result = outcome::hang;
  a.when = phase::run;
  EXPECT_FALSE(nlohmann::json(a).contains("ranks"));
  a.ranks = judge_ranks({waiting(rank(100, 0, 5)), faulted(rank(101, 1, 4), nccl_fault_action::killed, SIGKILL),
                         faulted(rank(102, 2, 4, 3), nccl_fault_action::stopped, SIGSTOP)},
                        hung({100, 102}));
  a.ranks[0].in_call = "ncclAllReduce";
  auto j = nlohmann::json(a);
  ASSERT_EQ(j["ranks"].size(), 3u);
  EXPECT_EQ(j["ranks"][0]["state"], "in-collective");
  EXPECT_EQ(j["ranks"][0]["last_collective"], "ncclAllReduce");
  EXPECT_EQ(j["ranks"][1]["state"], "dead");
  EXPECT_EQ(j["ranks"][1]["signal"]["name"], "SIGKILL");
  EXPECT_EQ(j["ranks"][1]["fault"]["action"], "killed");
  EXPECT_EQ(j["ranks"][1]["fault"]["call"], 5);
  EXPECT_EQ(j["ranks"][2]["state"], "outside");
  const auto b = j.get<run_record>();
  ASSERT_EQ(b.ranks.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b.ranks[i].rank, a.ranks[i].rank);
    EXPECT_EQ(b.ranks[i].pid, a.ranks[i].pid);
    EXPECT_EQ(b.ranks[i].state, a.ranks[i].state);
    EXPECT_EQ(b.ranks[i].collectives, a.ranks[i].collectives);
    EXPECT_EQ(b.ranks[i].last_collective, a.ranks[i].last_collective);
    EXPECT_EQ(b.ranks[i].in_call, a.ranks[i].in_call);
    EXPECT_EQ(b.ranks[i].fault, a.ranks[i].fault);
    EXPECT_EQ(b.ranks[i].fault_api, a.ranks[i].fault_api);
    EXPECT_EQ(b.ranks[i].fault_call, a.ranks[i].fault_call);
    EXPECT_EQ(b.ranks[i].signal, a.ranks[i].signal);
  }
  EXPECT_EQ(ranks_verdict(b.ranks), ranks_verdict(a.ranks));
}

TEST(run_record_ranks, a_signature_group_keeps_the_ranks_of_its_first_run) {
  run_record later, first;
  later.name = first.name = "ddp";
  later.result = first.result = outcome::hang;
  later.signature = first.signature = "hang: rank 1 outside ncclAllReduce #3 (stopped by nccl/ncclAllReduce), rank 0 waiting in it";
  later.run = 7;
  later.run_id = "ddp.s7";
  later.ranks = judge_ranks({waiting(rank(200, 0, 3)), faulted(rank(201, 1, 2), nccl_fault_action::stopped, SIGSTOP)}, hung({200, 201}));
  first.run = 2;
  first.run_id = "ddp.s2";
  first.ranks = judge_ranks({waiting(rank(100, 0, 3)), faulted(rank(101, 1, 2), nccl_fault_action::stopped, SIGSTOP)}, hung({100, 101}));
  const auto sums = summarise({later, first}, {"ddp"});
  ASSERT_EQ(sums[0].signatures.size(), 1u);
  ASSERT_EQ(sums[0].signatures[0].first_ranks.size(), 2u);
  EXPECT_EQ(sums[0].signatures[0].first_ranks[1].pid, 101);
  const auto j = to_json(sums[0]);
  EXPECT_EQ(j["signatures"][0]["ranks"][1]["state"], "outside");
  run_record plain = first;
  plain.ranks.clear();
  EXPECT_FALSE(to_json(summarise({plain}, {"ddp"})[0])["signatures"][0].contains("ranks"));
}

TEST(run_record_ranks, parse_results_refuses_malformed_rank_entries) {
  run_record a;
  a.run_id = "ddp.s1";
  a.name = "ddp";
  a.ranks = judge_ranks({waiting(rank(100, 0, 1, 1))}, hung({100}));
  const auto line = [&](const std::function<void(nlohmann::json&)>& damage) {
    auto j = nlohmann::json(a);
    damage(j);
    return j.dump() + "\n";
  };
  ASSERT_TRUE(parse_results(line([](nlohmann::json&) {})));
  for (const auto& bad : {line([](auto& j) { j["ranks"] = "0 in ncclAllReduce"; }),
                          line([](auto& j) { j["ranks"][0]["state"] = "sleeping"; }),
                          line([](auto& j) { j["ranks"][0].erase("pid"); }),
                          line([](auto& j) { j["ranks"][0]["collectives"] = "three"; }),
                          line([](auto& j) { j["ranks"][0] = 3; }),
                          line([](auto& j) { j["ranks"][0]["fault"] = {{"action", "killed"}}; })}) {
    auto parsed = parse_results(bad + line([](nlohmann::json&) {}));
    ASSERT_FALSE(parsed) << bad;
    EXPECT_NE(parsed.error().message().find("results line 1"), std::string::npos) << parsed.error().message();
  }
}

}  // namespace
}  // namespace faultline::harness
