// The lock/ points (lock_points.h) in a program that knows nothing of faultline
// (testing/lock_points_child.cc), with libfaultline_agent.so and libfaultline_lock_points.so
// preloaded.
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "faults/preload/testing/preload_run.h"

namespace faultline::agent {
namespace {

using namespace std::chrono_literals;
using testing::exited_0;

const std::string child_program = FAULTLINE_LOCK_POINTS_CHILD;
const std::string preload = std::string(FAULTLINE_AGENT_PRELOAD) + ":" + FAULTLINE_LOCK_POINTS_PRELOAD;

using testing::count;

std::vector<std::string> every_kind(const testing::preload_runner& r) {
  const std::string file = (r.dir() / "lockfile").string();
  return {child_program, "sem-shared", "sem-private", "mutex-shared", "mutex-private", "flock", file, "fcntl", file};
}

TEST(lock_points, without_an_item_every_lock_works) {
  testing::preload_runner r(preload);
  auto f = r.run("exit/end=off", every_kind(r));
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out,
            "sem-shared wait=0 release=0\nsem-private wait=0 release=0\nmutex-shared lock=0 unlock=0\n"
            "mutex-private lock=0 unlock=0\nflock lock=0 unlock=0\nfcntl lock=0 unlock=0\n");
}

// A later preload whose dlsym takes a mutex (HAMi-core's libvgpu.so): the wrappers find their
// next functions through glibc's dlsym, not through it, or its mutex would call them back forever.
TEST(lock_points, a_later_preloads_dlsym_that_takes_a_mutex_does_not_loop_the_wrappers) {
  testing::preload_runner r(preload + ":" + FAULTLINE_DLSYM_INTERPOSER);
  auto f = r.run("lock/*=print", every_kind(r));
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out,
            "sem-shared wait=0 release=0\nsem-private wait=0 release=0\nmutex-shared lock=0 unlock=0\n"
            "mutex-private lock=0 unlock=0\nflock lock=0 unlock=0\nfcntl lock=0 unlock=0\n");
}

TEST(lock_points, each_process_draws_a_probability_on_its_own) {
  testing::preload_runner r(preload);
  // 24 forked children each reach lock/sem/wait once at 50%: both outcomes happen when each
  // process draws from its own stream (all or none: odds of 1 in 8 million).
  r.make_phase_table();  // as the runner does: it gives each process its place
  auto f = r.run("lock/sem/wait=50%kill", {child_program, "sem-fork", "24"}, {"FAULTLINE_SEED=11"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  ASSERT_EQ(f.out.rfind("sem-fork killed=", 0), 0u) << f.out;
  const int killed = std::stoi(f.out.substr(16));
  EXPECT_GT(killed, 0) << f.out;
  EXPECT_LT(killed, 24) << f.out;
}

TEST(lock_points, shared_objects_pass_every_point_and_private_ones_none) {
  testing::preload_runner r(preload);
  auto f = r.run("lock/*=print", every_kind(r));
  ASSERT_TRUE(exited_0(f)) << f.err;
  for (const char* kind : {"sem", "mutex", "file"}) {
    for (const char* where : {"wait", "acquired", "release"}) {
      const std::string point = std::string("lock/") + kind + "/" + where;
      // sem and mutex: the shared object only; file: flock and fcntl.
      EXPECT_EQ(count(f.err, "fault point " + point + " reached"), std::string(kind) == "file" ? 2u : 1u)
          << point << "\n" << f.err;
    }
  }
  EXPECT_EQ(r.reached(f.pid), "lock/*\n");
}

TEST(lock_points, fail_refuses_a_wait_with_its_errno) {
  testing::preload_runner r(preload);
  const std::string file = (r.dir() / "lockfile").string();
  auto f = r.run("lock/sem/wait=fail(EAGAIN);lock/file/wait=fail(ENOLCK)",
                 {child_program, "sem-shared", "sem-private", "flock", file, "fcntl", file});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out,
            "sem-shared wait=EAGAIN release=0\nsem-private wait=0 release=0\nflock lock=ENOLCK unlock=0\n"
            "fcntl lock=ENOLCK unlock=0\n");
}

// Killed just after it took a robust mutex, in the function the filter names: the mutex is held
// by a dead process, and the parent's lock (outside that function: not killed) says so.
TEST(lock_points, kill_at_acquired_leaves_the_lock_to_a_dead_holder) {
  testing::preload_runner r(preload);
  auto f = r.run("lock/mutex/acquired@held_by_child=kill", {child_program, "robust-child"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "robust-child child=137 parent=EOWNERDEAD\n");
  auto g = r.run("", {child_program, "robust-child"});  // without it: the child exits holding it
  EXPECT_EQ(g.out, "robust-child child=0 parent=EOWNERDEAD\n");
}

// Issue 28: the filter read only what dladdr sees (exported symbols), so on a program built the
// ordinary way, naming a static function, it never fired. It reads the symbol tables as fn/ does.
TEST(lock_points, a_filter_finds_a_static_function_of_a_program_built_without_exports) {
  testing::preload_runner r(preload);
  const std::string plain = FAULTLINE_LOCK_POINTS_CHILD_PLAIN;
  auto f = r.run("lock/mutex/acquired@worker_step=kill", {plain, "robust-child-static"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "robust-child-static child=137 parent=EOWNERDEAD\n");
  // An exported function of the same program is found too, and a prefix filter.
  auto g = r.run("lock/mutex/acquired@held_by*=kill", {plain, "robust-child"});
  EXPECT_EQ(g.out, "robust-child child=137 parent=EOWNERDEAD\n");
  // The filter still narrows: the parent's lock (in main) is not killed.
  auto h = r.run("lock/mutex/acquired@no_such_caller=kill", {plain, "robust-child-static"});
  EXPECT_EQ(h.out, "robust-child-static child=0 parent=EOWNERDEAD\n");
}

TEST(lock_points, delay_at_release_holds_the_lock_longer) {
  testing::preload_runner r(preload);
  auto f = r.run("lock/sem/release=delay(300ms)", {child_program, "sem-private", "sem-shared"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_GE(f.took, 300ms);
  auto g = r.run("lock/sem/release=delay(300ms)", {child_program, "sem-private"});
  ASSERT_TRUE(exited_0(g)) << g.err;
  EXPECT_EQ(r.reached(g.pid), "");  // a private semaphore is not a point
}

// `faultline exec` preloads the lock library for a spec naming lock/ points: the child dies
// holding the mutex, the run passes (the program handles EOWNERDEAD), and the point no process
// reached is named.
TEST(lock_points, faultline_exec_preloads_them_for_a_lock_spec) {
  testing::preload_runner r(preload);
  const std::string out = (r.dir() / "campaign").string();
  const std::string summary = (r.dir() / "summary.json").string();
  const std::string cmd = std::string(FAULTLINE_CLI) + " exec --json --out " + out +
                          " --faults 'lock/mutex/acquired@held_by_child=kill;lock/sem/wait=print' -- " + child_program +
                          " robust-child > " + summary + " 2>/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string json = testing::slurp(summary);
  EXPECT_NE(json.find("\"points_never_reached\":[\"lock/sem/wait\"]"), std::string::npos) << json;
  std::string log;
  for (const auto& e : std::filesystem::directory_iterator(out + "/logs")) log += testing::slurp(e.path());
  EXPECT_NE(log.find("robust-child child=137 parent=EOWNERDEAD"), std::string::npos) << log;
}

// A stripped program whose symbols are in a separate debug file (.gnu_debuglink, as distributions
// ship them): the filter reads that file's .symtab. Without it, a static function cannot be named.
TEST(lock_points, a_filter_reads_a_stripped_programs_separate_debug_file) {
  testing::preload_runner r(preload);
  const std::string plain = FAULTLINE_LOCK_POINTS_CHILD_PLAIN;
  const std::string stripped = (r.dir() / "stripped_child").string();
  const std::string debug = (r.dir() / "stripped_child.debug").string();
  const std::string make = "objcopy --only-keep-debug " + plain + " " + debug + " && objcopy --strip-all --add-gnu-debuglink=" +
                           debug + " " + plain + " " + stripped;
  if (std::system(("command -v objcopy > /dev/null && " + make).c_str()) != 0) GTEST_SKIP() << "objcopy is not installed";
  auto f = r.run("lock/mutex/acquired@worker_step=kill", {stripped, "robust-child-static"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "robust-child-static child=137 parent=EOWNERDEAD\n");
  // The command reads the same tables: it accepts the filter, and refuses it once they are gone.
  const auto exec_code = [&] {
    const std::string cmd = std::string(FAULTLINE_CLI) + " exec --out " + (r.dir() / "campaign").string() +
                            " --faults 'lock/mutex/acquired@worker_step=kill' -- " + stripped +
                            " robust-child-static > /dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    std::filesystem::remove_all(r.dir() / "campaign");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(exec_code(), 0);
  std::filesystem::remove(debug);
  auto g = r.run("lock/mutex/acquired@worker_step=kill", {stripped, "robust-child-static"});
  EXPECT_EQ(g.out, "robust-child-static child=0 parent=EOWNERDEAD\n");
  EXPECT_EQ(exec_code(), 2) << "a usage error: worker_step is in no symbol table left";
}

// Issue 28: a filter or fn/ point naming a function the program has nowhere is a usage error
// before run 1 (exit 2, nothing run), with the nearest name; one it has (a static function of a
// program built without exports, or one in a library it links) runs.
TEST(lock_points, faultline_exec_refuses_functions_the_program_does_not_have) {
  testing::preload_runner r(preload);
  const std::string plain = FAULTLINE_LOCK_POINTS_CHILD_PLAIN;
  const auto exec = [&](const std::string& spec, const std::string& command) {
    const std::string out = (r.dir() / "campaign").string();
    const std::string err = (r.dir() / "err.txt").string();
    const std::string cmd = std::string(FAULTLINE_CLI) + " exec --out " + out + " --faults '" + spec + "' -- " + command +
                            " > /dev/null 2> " + err;
    const int status = std::system(cmd.c_str());
    std::filesystem::remove_all(out);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, testing::slurp(err));
  };
  auto [code, err] = exec("lock/mutex/acquired@worker_stpe=kill", plain + " robust-child-static");
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("lock/mutex/acquired@worker_stpe: no function worker_stpe in " + plain), std::string::npos) << err;
  EXPECT_NE(err.find("(did you mean worker_step?)"), std::string::npos) << err;
  std::tie(code, err) = exec("fn/no_such_fn=kill", plain + " robust-child-static");
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("fn/no_such_fn: no function no_such_fn"), std::string::npos) << err;
  // Through a launcher: the program among its arguments is read too.
  std::tie(code, err) = exec("lock/*@nope*=kill", "sh -c \"" + plain + " robust-child-static\"");
  EXPECT_EQ(code, 2) << err;
  for (const char* spec : {"lock/mutex/acquired@worker_step=kill", "lock/mutex/acquired@held_by*=kill",
                           "fn/worker_step=print", "fn/malloc=print"}) {
    std::tie(code, err) = exec(spec, plain + " robust-child-static");
    EXPECT_EQ(code, 0) << spec << "\n" << err;
  }
}

// Issue 39: on code GCC optimized (testing/optimized_locks.c, -O2), a filter names the source
// function, whatever the compiler made of it. What `faultline exec` runs, with the check before
// run 1 and its inlined sites; returns its exit status, the runs' logs and points.PID files, and
// the command's stderr.
struct exec_result {
  int code = -1;
  std::string logs, points, err;
};

exec_result exec_program(const testing::preload_runner& r, const std::string& spec, const std::string& command) {
  const std::string out = (r.dir() / "campaign").string();
  const std::string err = (r.dir() / "exec-err.txt").string();
  const std::string cmd = std::string(FAULTLINE_CLI) + " exec --keep all --out " + out + " --faults '" + spec + "' -- " +
                          command + " > /dev/null 2> " + err;
  const int status = std::system(cmd.c_str());
  exec_result x;
  x.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  x.err = testing::slurp(err);
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".log")) x.logs += testing::slurp(e.path());
    if (name.rfind("points.", 0) == 0) x.points += testing::slurp(e.path());
  }
  std::filesystem::remove_all(out, ec);
  return x;
}

// give_slot is in .symtab only as give_slot.isra.0, and it ends in `jmp sem_post`: no frame names
// it while sem_post runs. Before: refused before run 1 ("no function give_slot"), and with the
// check passed by, never reached.
TEST(lock_points, a_filter_matches_a_compiler_clone_that_tail_calls_the_lock) {
  if (std::string(FAULTLINE_OPTIMIZED_LOCKS).empty()) GTEST_SKIP() << "built only with GCC (its clone names)";
  testing::preload_runner r(preload);
  const std::string program = FAULTLINE_OPTIMIZED_LOCKS;
  auto f = r.run("lock/sem/release@give_slot=print", {program, "isra"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "isra wait=0 release=0\n");
  EXPECT_EQ(count(f.err, "fault point lock/sem/release reached in give_slot.isra.0, a tail call (injected: print)"), 1u)
      << f.err;
  EXPECT_EQ(r.reached(f.pid), "lock/sem/release@give_slot\nlock/sem/release@give_slot in give_slot.isra.0, a tail call\n");
  // The clone's own name, and kill: the semaphore is left unposted by a dead process.
  auto g = r.run("lock/sem/release@give_slot.isra.0=kill", {program, "isra"});
  ASSERT_TRUE(WIFSIGNALED(g.status)) << g.err;
  EXPECT_EQ(WTERMSIG(g.status), SIGKILL);
  // Not every sem_post: main's own sem_wait (acquired) is not give_slot's.
  auto h = r.run("lock/sem/acquired@give_slot=print", {program, "isra"});
  EXPECT_EQ(count(h.err, "fault point"), 0u) << h.err;
  // The command accepts the filter and runs it.
  const exec_result x = exec_program(r, "lock/sem/release@give_slot=print", program + " isra");
  EXPECT_EQ(x.code, 0) << x.err;
  EXPECT_NE(x.logs.find("reached in give_slot.isra.0, a tail call"), std::string::npos) << x.logs << x.err;
  // Without DWARF, copies of give_slot inlined elsewhere would be unseen: said before run 1, with
  // the program's other functions that post (what to name if the point is never reached).
  EXPECT_NE(x.err.find("faultline: note: lock/sem/release@give_slot: without DWARF (.debug_info), copies of give_slot "
                       "that the compiler inlined into other functions cannot be seen"),
            std::string::npos)
      << x.err;
  EXPECT_NE(x.err.find("name one of the other functions that call sem_post: "), std::string::npos) << x.err;
  EXPECT_EQ(x.err.find("call sem_post: give_slot"), std::string::npos) << x.err;
  // With DWARF there is nothing unseen to say.
  const exec_result d = exec_program(r, "lock/sem/release@give_slot=print", std::string(FAULTLINE_OPTIMIZED_LOCKS_G) + " isra");
  EXPECT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(d.err.find("faultline: note:"), std::string::npos) << d.err;
}

// settle_slot posts only on its unlikely path, which GCC moved to settle_slot.cold: the frame
// that calls sem_post is in the cold part. Before: that frame's name was not settle_slot.
TEST(lock_points, a_filter_matches_the_cold_part_split_from_a_function) {
  if (std::string(FAULTLINE_OPTIMIZED_LOCKS).empty()) GTEST_SKIP() << "built only with GCC (its clone names)";
  testing::preload_runner r(preload);
  auto f = r.run("lock/sem/release@settle_slot=print", {FAULTLINE_OPTIMIZED_LOCKS, "cold"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "cold settle=0\n");
  EXPECT_EQ(count(f.err, "fault point lock/sem/release reached in settle_slot.cold (injected: print)"), 1u) << f.err;
}

// take_inline has no symbol: GCC inlined it into first_taker and second_taker. With DWARF the
// command finds both copies before run 1 and the filter matches at each; without, it refuses the
// item before run 1, says why, and names the functions to name instead. Before: refused both
// times as "no function take_inline", with no reason.
TEST(lock_points, a_filter_matches_an_inlined_function_where_the_dwarf_says_and_is_refused_with_the_reason_without) {
  if (std::string(FAULTLINE_OPTIMIZED_LOCKS).empty()) GTEST_SKIP() << "built only with GCC (its clone names)";
  testing::preload_runner r(preload);
  const exec_result x = exec_program(r, "lock/sem/acquired@take_inline=print", std::string(FAULTLINE_OPTIMIZED_LOCKS_G) + " inline");
  ASSERT_EQ(x.code, 0) << x.err;
  EXPECT_NE(x.logs.find("inline first=0 second=0"), std::string::npos) << x.logs;
  EXPECT_EQ(count(x.logs, "fault point lock/sem/acquired reached in take_inline inlined into first_taker"), 1u) << x.logs;
  EXPECT_EQ(count(x.logs, "fault point lock/sem/acquired reached in take_inline inlined into second_taker"), 1u) << x.logs;
  EXPECT_NE(x.points.find("lock/sem/acquired@take_inline\n"), std::string::npos) << x.points;

  const std::string plain = FAULTLINE_OPTIMIZED_LOCKS;
  const exec_result y = exec_program(r, "lock/sem/acquired@take_inline=print", plain + " inline");
  EXPECT_EQ(y.code, 2) << y.err;
  EXPECT_NE(y.err.find("lock/sem/acquired@take_inline: no function take_inline in " + plain), std::string::npos) << y.err;
  EXPECT_NE(y.err.find("Without DWARF (.debug_info) nothing shows where a function was inlined"), std::string::npos) << y.err;
  EXPECT_NE(y.err.find("that call sem_clockwait, sem_timedwait, sem_trywait, sem_wait: first_taker, main, second_taker)"),
            std::string::npos)
      << y.err;
  // A name in neither the symbols nor the DWARF: the ordinary refusal, with the nearest name.
  const exec_result z = exec_program(r, "lock/sem/acquired@take_inlin=print", std::string(FAULTLINE_OPTIMIZED_LOCKS_G) + " inline");
  EXPECT_EQ(z.code, 2) << z.err;
  EXPECT_NE(z.err.find("no inlined copy of it in their DWARF"), std::string::npos) << z.err;
}

}  // namespace
}  // namespace faultline::agent
