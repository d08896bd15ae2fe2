// The process tree over real processes: membership by parent chain and process group, and a
// scan that is already stale when it is used (processes reaped in between, as happens when
// several runs share the harness) must neither loop nor adopt the vanished process.
#include "harness/run/process_tree.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <algorithm>
#include <future>
#include <thread>

#include "harness/run/process.h"

namespace faultline::harness {
namespace {

using namespace std::chrono_literals;

child start(std::vector<std::string> argv) {
  spawn_options o;
  o.argv = std::move(argv);
  o.envp = current_environment();
  auto c = spawn(o);
  EXPECT_TRUE(c) << c.error().message();
  return c ? std::move(*c) : child();
}

TEST(process_tree, finds_the_children_of_its_leader) {
  ASSERT_TRUE(become_subreaper());
  child leader = start({"/bin/sh", "-c", "sleep 300 & sleep 300 & wait"});
  process_tree tree(leader.pid(), "/nonexistent/run");
  for (int i = 0; i < 200 && tree.alive().size() < 3; ++i) {
    std::this_thread::sleep_for(10ms);
    tree.refresh();
  }
  EXPECT_EQ(tree.alive().size(), 3u);
  EXPECT_TRUE(tree.terminate(200ms).empty());
  leader.reap();
  tree.reap();
  EXPECT_TRUE(tree.alive().empty());
}

TEST(process_tree, stale_scan_with_a_reaped_process_neither_loops_nor_adopts_it) {
  ASSERT_TRUE(become_subreaper());
  child leader = start({"/bin/sleep", "300"});
  process_tree tree(leader.pid(), "/nonexistent/run");

  // A child of the leader's group as the scan saw it — but reaped before the tree looks.
  child gone = start({"/bin/true"});
  auto seen = detail::read_stat(gone.pid());
  ASSERT_TRUE(seen);
  detail::proc_stat stale = *seen;
  stale.ppid = leader.pid();
  stale.pgrp = leader.pid();
  gone.reap();

  auto done = std::async(std::launch::async, [&] { tree.refresh({stale}); });
  ASSERT_EQ(done.wait_for(30s), std::future_status::ready) << "refresh kept retrying a vanished process";
  auto pids = tree.pids();
  EXPECT_EQ(std::count(pids.begin(), pids.end(), stale.pid), 0);

  EXPECT_TRUE(tree.terminate(200ms).empty());
  leader.reap();
}

}  // namespace
}  // namespace faultline::harness

namespace faultline::harness {
namespace {

TEST(process_tree_leader, a_leader_gone_before_the_tree_saw_it_is_still_among_its_pids) {
  // A program that crashes at once may be reaped (by its keeper) before the tree reads /proc;
  // its core is looked up by the tree's pids, so the leader must be there.
  pid_t gone = ::fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) ::_exit(0);
  int st = 0;
  ASSERT_EQ(::waitpid(gone, &st, 0), gone);
  process_tree tree(gone, "/nonexistent/run");
  EXPECT_TRUE(tree.alive().empty());
  EXPECT_EQ(tree.pids(), std::vector<pid_t>{gone});
}

}  // namespace
}  // namespace faultline::harness
