// spawn/parent and process/start (spawn_points.h) in programs that know nothing of faultline:
// testing/spawn_points_child.cc (fork, vfork, posix_spawnp, execvp) and Python's multiprocessing
// children, with libfaultline_agent.so preloaded.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <csignal>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "faults/preload/testing/preload_run.h"

namespace faultline::agent {
namespace {

using namespace std::chrono_literals;
using testing::exited_0;

const std::string child_program = FAULTLINE_SPAWN_POINTS_CHILD;
const std::string preload_library = FAULTLINE_AGENT_PRELOAD;

using testing::count;

TEST(spawn_points, without_an_item_every_way_of_starting_a_process_works) {
  testing::preload_runner r(preload_library);
  auto f = r.run("exit/end=off", {child_program, "fork", "vfork", "spawn", "true", "exec", "true"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_NE(f.out.find("fork rc=0\nvfork rc=0\nspawn rc=0 status=0\n"), std::string::npos) << f.out;
  EXPECT_EQ(count(f.out, "child "), 1u);
}

TEST(spawn_points, fail_refuses_the_spawn_with_its_errno_and_counts_hold) {
  testing::preload_runner r(preload_library);
  auto f = r.run("spawn/parent=2*fail(EAGAIN)", {child_program, "fork", "vfork", "fork", "spawn", "true"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "fork errno=EAGAIN\nvfork errno=EAGAIN\n" + f.out.substr(f.out.find("child ")));
  EXPECT_NE(f.out.find("fork rc=0\nspawn rc=0 status=0\n"), std::string::npos) << f.out;
  auto g = r.run("spawn/parent=fail(ENOMEM)", {child_program, "spawn", "true", "exec", "true"});
  ASSERT_TRUE(exited_0(g)) << g.err;
  EXPECT_EQ(g.out, "spawn rc=ENOMEM\nexec errno=ENOMEM\n");
}

TEST(spawn_points, a_filter_names_the_program_to_be_started) {
  testing::preload_runner r(preload_library);
  auto f = r.run("spawn/parent@false=fail(EPERM)", {child_program, "spawn", "true", "spawn", "false"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "spawn rc=0 status=0\nspawn rc=EPERM\n");
  EXPECT_EQ(r.reached(f.pid), "spawn/parent@false\n");
}

TEST(spawn_points, process_start_acts_in_each_new_process_before_main) {
  testing::preload_runner r(preload_library);
  // The program itself, its forked child, and the programs it spawns and execs each start once.
  auto f = r.run("process/start=print", {child_program, "fork", "spawn", "true", "exec", "true"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(count(f.err, "fault point process/start reached"), 4u) << f.err;
  // Killed before main: the program prints nothing.
  auto k = r.run("process/start@faultline_spawn_points_child=kill", {child_program, "fork"});
  ASSERT_TRUE(WIFSIGNALED(k.status));
  EXPECT_EQ(WTERMSIG(k.status), SIGKILL);
  EXPECT_EQ(k.out, "");
  // Only the program the filter names.
  testing::preload_runner other(preload_library);
  auto d = other.run("process/start@sleep=delay(300ms)", {child_program, "spawn", "true"});
  ASSERT_TRUE(exited_0(d)) << d.err;
  EXPECT_TRUE(other.all_reached().empty());  // no process of the run is `sleep`
  auto e = r.run("process/start@true=delay(300ms)", {child_program, "spawn", "true"});
  ASSERT_TRUE(exited_0(e)) << e.err;
  EXPECT_GE(e.took, 300ms);
}

// Each process reaches process/start once, so its N* counts are the run's: "the first two
// processes of the run go on, every later one is killed", whichever process starts which.
TEST(spawn_points, process_start_counts_are_kept_across_the_runs_processes) {
  testing::preload_runner r(preload_library);
  auto f = r.run("process/start=2*off->kill", {child_program, "spawn", "true", "spawn", "true", "spawn", "true"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "spawn rc=0 status=0\nspawn rc=0 status=137\nspawn rc=0 status=137\n");
  // With a filter, only the processes it names count: the program itself is not `true`.
  testing::preload_runner g(preload_library);
  auto t = g.run("process/start@true=1*off->kill", {child_program, "spawn", "true", "spawn", "true"});
  ASSERT_TRUE(exited_0(t)) << t.err;
  EXPECT_EQ(t.out, "spawn rc=0 status=0\nspawn rc=0 status=137\n");
}

// Python's multiprocessing children, each start method: the child's start is delayed; the parent
// joins it with a timeout and reports whether it finished.
TEST(spawn_points, python_multiprocessing_children_are_reached_with_every_start_method) {
  const std::string script =
      "import multiprocessing as mp, sys, time\n"
      "def work(): pass\n"
      "if __name__ == '__main__':\n"
      "    ctx = mp.get_context(sys.argv[1])\n"
      "    p = ctx.Process(target=work); t = time.monotonic(); p.start(); p.join(20)\n"
      "    print(sys.argv[1], 'exitcode', p.exitcode, 'slow' if time.monotonic() - t >= 0.4 else 'quick')\n";
  for (const char* method : {"spawn", "forkserver", "fork"}) {
    testing::preload_runner r(preload_library);
    const std::string file = (r.dir() / "mp_children.py").string();  // spawn re-imports the main module
    {
      std::ofstream out(file);
      out << script;
    }
    // process/start of every python process, the parent's own included: print shows them.
    auto f = r.run("process/start@python3*=print", {"python3", file, method});
    ASSERT_TRUE(exited_0(f)) << method << ": " << f.err;
    EXPECT_EQ(f.out.substr(0, f.out.rfind(' ')), std::string(method) + " exitcode 0");  // quick or slow
    EXPECT_GE(count(f.err, "fault point process/start reached"), 2u) << method << ": " << f.err;
    // Delayed: the parent's own start too, but before it reads the clock; each child's after.
    auto d = r.run("process/start@python3*=delay(500ms)", {"python3", file, method});
    ASSERT_TRUE(exited_0(d)) << method << ": " << d.err;
    EXPECT_EQ(d.out, std::string(method) + " exitcode 0 slow\n") << method;
  }
}

}  // namespace
}  // namespace faultline::agent
