// Classification from synthetic evidence and run directories: every outcome, the phase rules
// (agent markers, gtest premature-exit file and XML), and signatures that name the program's
// frames rather than the agent's, libc's, the C++ or CUDA runtime's. Stacks are read in each
// format the runner writes (gdb, eu-stack, agent, /proc, core sections); a crash's frames come
// from crash-stacks.txt when it holds the crashing thread; a hang is named by where its threads
// block. Two tests use real programs: a program built without debug info whose static function
// only .symtab names (symbolised through addr2line), and gdb / eu-stack attaching to a stopped
// process (which must stay stopped).
#include "harness/run/classify.h"
#include "harness/run/core_dump.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "faults/preload/protocol.h"
#include "harness/detail/proc.h"
#include "harness/detail/sys.h"
#include "harness/run/process.h"
#include "harness/run/stacks.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

class classify_dir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fl_classify_test." + std::to_string(::getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    e_.run_dir = dir_;
    e_.log_path = dir_ / "run.log";
    e_.leader = 1000;
    write("run.log", "");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  static int exited(int code) { return code << 8; }
  static int killed(int sig) { return sig; }

  fs::path dir_;
  run_evidence e_;
};

constexpr const char* crash_text =
    "signal 11 SIGSEGV\n"
    "thread 1000 main\n"
    "#0 0x55d4c3a1b2c0 /opt/app/bin/prog+0x12c0 pool::release(void*)\n"
    "#1 0x55d4c3a1b300 /opt/app/bin/prog+0x1300 _ZN4pool7destroyEv\n"
    "#2 0x7f0000001000 /lib/x86_64-linux-gnu/libc.so.6+0x1000 __run_exit_handlers\n"
    "#3 0x7f0000002000 /lib/x86_64-linux-gnu/libc.so.6+0x2000 exit\n"
    "#4 0x55d4c3a1b400 /opt/app/bin/prog+0x1400 std::vector<int, std::allocator<int> >::~vector()\n"
    "#5 0x55d4c3a1b500 /opt/app/bin/prog+0x1500 main\n"
    "#6 0x7f0000003000 /lib/x86_64-linux-gnu/libc.so.6+0x3000 __libc_start_main\n";

TEST(parse_crash, reads_signal_thread_and_frames) {
  auto r = parse_crash(crash_text);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->signal, SIGSEGV);
  EXPECT_EQ(r->thread, 1000);
  ASSERT_EQ(r->frames.size(), 7u);
  EXPECT_EQ(r->frames[0].function, "pool::release");
  EXPECT_EQ(r->frames[0].module, "/opt/app/bin/prog");
  EXPECT_TRUE(r->frames[0].has_offset);
  EXPECT_EQ(r->frames[0].offset, 0x12c0u);
  EXPECT_EQ(r->frames[1].function, "pool::destroy");  // the agent left it mangled
}

TEST(parse_crash, rejects_text_without_a_signal_line) {
  EXPECT_FALSE(parse_crash("thread 1\n#0 0x1 a+0x1 f\n"));
  EXPECT_FALSE(parse_crash(""));
}

TEST(frames_signature, keeps_the_top_three_program_frames) {
  auto r = parse_crash(crash_text);
  EXPECT_EQ(frames_signature(r->frames), "pool::release | pool::destroy | main");
  EXPECT_EQ(frames_signature(r->frames, 1), "pool::release");
}

TEST(frames_signature, starts_after_a_signal_trampoline) {
  std::vector<frame> f = {{"crash_handler", "/opt/prog", 0x10, true},
                          {"__restore_rt", "/lib/x86_64-linux-gnu/libc.so.6", 0x20, true},
                          {"do_work", "/opt/prog", 0x30, true},
                          {"main", "/opt/prog", 0x40, true}};
  EXPECT_EQ(frames_signature(f), "do_work | main");
}

TEST(frames_signature, names_unsymbolised_frames_by_module_and_offset) {
  std::vector<frame> f = {{"??", "/opt/app/libwork.so", 0x4a2, true}, {"??", "??", 0x99, true}, {"main", "/opt/prog", 0x40, true}};
  EXPECT_EQ(frames_signature(f), "libwork.so+0x4a2 | main");
}

TEST(meaningful, skips_runtime_agent_and_startup_frames) {
  EXPECT_FALSE(meaningful({"abort", "/lib/x86_64-linux-gnu/libc.so.6", 1, true}));
  EXPECT_FALSE(meaningful({"raise", "", 0, false}));
  EXPECT_FALSE(meaningful({"__GI___clock_nanosleep", "", 0, false}));
  EXPECT_FALSE(meaningful({"faultline::agent::detail::on_crash", "/opt/prog", 1, true}));
  EXPECT_FALSE(meaningful({"write_crash", "/build/lib/libfaultline_agent.so", 1, true}));
  EXPECT_FALSE(meaningful({"std::terminate", "", 0, false}));
  EXPECT_FALSE(meaningful({"__cxxabiv1::__terminate", "", 0, false}));
  EXPECT_FALSE(meaningful({"<signal handler called>", "", 0, false}));
  EXPECT_FALSE(meaningful({"_start", "/opt/prog", 1, true}));
  EXPECT_TRUE(meaningful({"pool::release", "/opt/prog", 1, true}));
  EXPECT_TRUE(meaningful({"main", "", 0, false}));
}

TEST(meaningful, skips_runtime_modules_whatever_the_name) {
  for (const char* module : {"/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libpthread.so.0",
                             "/lib/x86_64-linux-gnu/libgcc_s.so.1", "/lib64/ld-linux-x86-64.so.2", "linux-vdso.so.1",
                             "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/local/cuda/lib64/libcudart.so.12",
                             "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1",
                             "/opt/faultline/lib/libfaultline_agent.so"})
    EXPECT_FALSE(meaningful({"pool_release", module, 0x10, true})) << module;
  EXPECT_FALSE(meaningful({"??", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x10, true}));
  // libcudart_static is linked into the program: its frames are recognised by name.
  EXPECT_FALSE(meaningful({"cudart::globalState::~globalState", "/opt/prog", 0x10, true}));
  // ... and as symbol-table names only (no debug info; CUDA 13's static runtime, read by libdwfl).
  EXPECT_FALSE(meaningful({"libcudart_static_19d132c815f85334ee1756d16281ce95ea02e148", "/opt/prog", 0x10, true}));
  EXPECT_TRUE(meaningful({"pool_release", "/opt/app/libpool.so", 0x10, true}));
  EXPECT_TRUE(meaningful({"??", "/opt/app/libpool.so", 0x10, true}));
}

TEST(meaningful, judges_a_frame_without_module_by_its_name) {
  // gdb names libc's functions without "from libc.so.6" when libc has debug info.
  for (const char* name : {"epoll_wait", "read", "clock_nanosleep", "pthread_cond_wait", "pthread_join",
                           "sem_wait", "futex_wait", "_IO_fgets", "_dl_fini"})
    EXPECT_FALSE(meaningful({name, "", 0, false})) << name;
  EXPECT_TRUE(meaningful({"wait_for_child", "", 0, false}));
  // A module that is the program's says more than the name does.
  EXPECT_TRUE(meaningful({"read", "/opt/prog", 0x10, true}));
  EXPECT_FALSE(meaningful({"??", "", 0, false}));
}

TEST(frames_signature, falls_back_to_the_first_module_when_every_frame_is_a_runtimes) {
  std::vector<frame> cuda = {{"??", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x1234, true},
                             {"??", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x5678, true},
                             {"start_thread", "/lib/x86_64-linux-gnu/libc.so.6", 0x891f5, true}};
  EXPECT_EQ(frames_signature(cuda), "libcuda.so.1+0x1234");
  // After the handler's frames: the first frame the signal interrupted.
  std::vector<frame> handled = {{"faultline::agent::detail::on_crash", "/opt/lib/libfaultline_agent.so", 0x40, true},
                                {"<signal handler called>", "", 0, false},
                                {"free", "/lib/x86_64-linux-gnu/libc.so.6", 0xa4f0, true},
                                {"??", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x1234, true}};
  EXPECT_EQ(frames_signature(handled), "libc.so.6+0xa4f0");
  // gdb gives modules without offsets.
  std::vector<frame> gdb = {{"??", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0, false}};
  EXPECT_EQ(frames_signature(gdb), "libcuda.so.1");
  EXPECT_EQ(frames_signature({{"??", "", 0, false}, {"raise", "", 0, false}}), "");
  EXPECT_EQ(frames_signature({}), "");
}

TEST(strip_parameters, removes_the_final_parameter_list) {
  EXPECT_EQ(strip_parameters("ns::f(int, char*)"), "ns::f");
  EXPECT_EQ(strip_parameters("ns::f(int) const"), "ns::f");
  EXPECT_EQ(strip_parameters("S::operator()(int)"), "S::operator()");
  EXPECT_EQ(strip_parameters("f(std::function<void (int)>)"), "f");
  EXPECT_EQ(strip_parameters("main"), "main");
}

TEST(strip_parameters, removes_clone_suffixes_and_keeps_operator_names) {
  EXPECT_EQ(strip_parameters("helper_static(int) [clone .isra.0]"), "helper_static");
  EXPECT_EQ(strip_parameters("ns::f(int) [clone .constprop.0] [clone .cold]"), "ns::f");
  EXPECT_EQ(strip_parameters("S::operator()"), "S::operator()");
  EXPECT_EQ(strip_parameters("main::{lambda()#1}::operator()() const"), "main::{lambda()#1}::operator()");
  EXPECT_EQ(strip_parameters("(anonymous namespace)::touch(int)"), "(anonymous namespace)::touch");
}

constexpr const char* gdb_stacks =
    "=== process 1000 (prog) ppid 1 pgrp 1000 state S via gdb ===\n"
    "Thread 2 (Thread 0x7f01 (LWP 1001) \"worker\"):\n"
    "#0  0x00007f in __GI___poll (fds=0x1) at poll.c:29\n"
    "#1  0x000055 in worker_loop () at w.cc:3\n"
    "\n"
    "Thread 1 (Thread 0x7f00 (LWP 1000) \"prog\"):\n"
    "#0  0x00007f in __futex_abstimed_wait_common64 (private=0) at futex-internal.c:57\n"
    "#1  0x00007f in __pthread_clockjoin_ex (threadid=1) at pthread_join_common.c:105\n"
    "#2  0x000055 in registry::unregister (this=0x1, id=3) at registry.cc:88\n"
    "#3  0x000055 in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6\n"
    "#4  main () at main.cc:12\n"
    "\n"
    "=== process 1002 (child) ppid 1000 pgrp 1000 state S via agent ===\n"
    "thread 1002 child\n"
    "#0 0x7f00 /lib/x86_64-linux-gnu/libc.so.6+0x100 read\n"
    "#1 0x5500 /opt/child+0x200 wait_for_parent()\n"
    "#2 0x5501 /opt/child+0x300 main\n"
    "\n"
    "end\n";

TEST(thread_frames, finds_the_main_thread_in_a_gdb_section) {
  auto f = thread_frames(gdb_stacks, 1000, 1000);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[2].function, "registry::unregister");
  EXPECT_EQ(f[3].module, "/lib/x86_64-linux-gnu/libstdc++.so.6");
  EXPECT_EQ(frames_signature(f), "registry::unregister | main");
}

TEST(thread_frames, finds_a_thread_in_an_agent_section) {
  auto f = thread_frames(gdb_stacks, 1002, 1002);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(frames_signature(f), "wait_for_parent | main");
  EXPECT_TRUE(thread_frames(gdb_stacks, 4242, 4242).empty());
}

TEST(thread_frames, reads_gdb_frames_of_a_program_without_debug_info) {
  constexpr const char* text =
      "=== process 2000 (prog) ppid 1 pgrp 2000 state T via gdb ===\n"
      "Thread 1 (LWP 2000):\n"
      "#0  0x000055d4c3a1b374 in (anonymous namespace)::nodebug_worker_touch(int) ()\n"
      "#1  0x000055d4c3a1b3a0 in helper(int) [clone .isra.0] ()\n"
      "#2  0x00007f0000001000 in std::function<void (int)>::operator() (this=0x1, __args#0=3) at /usr/include/c++/12/bits/std_function.h:591\n"
      "#3  0x00007f0000002000 in S::operator() (this=0x7ffc) at s.cc:9\n"
      "#4  0x00007f0000003000 in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6\n";
  auto f = thread_frames(text, 2000, 2000);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0].function, "(anonymous namespace)::nodebug_worker_touch");
  EXPECT_EQ(f[0].module, "");
  EXPECT_EQ(f[1].function, "helper");
  EXPECT_EQ(f[2].function, "std::function<void (int)>::operator()");
  EXPECT_EQ(f[3].function, "S::operator()");
  EXPECT_EQ(f[4].function, "??");
  EXPECT_EQ(f[4].module, "/lib/x86_64-linux-gnu/libstdc++.so.6");
}

// `eu-stack -m -i -p PID` (elfutils 0.188) as the runner writes it, and as a user pastes it:
// "- 1" marks (-a) and a frame without a symbol included.
constexpr const char* eu_stack_text =
    "=== process 3000 (prog) ppid 1 pgrp 3000 state S via eu-stack ===\n"
    "PID 3000 - process\n"
    "TID 3000:\n"
    "#0  0x00007f7c4c2ed545 clock_nanosleep@GLIBC_2.2.5 - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x00007f7c4c2f1e53 __nanosleep - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "#2  0x000055d689cc9150 wait_for_child(int) - /opt/prog\n"
    "#3  0x000055d689cc9150 main - /opt/prog\n"
    "#4  0x00007f7c4c245305 __libc_start_main@@GLIBC_2.34 - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "TID 3001:\n"
    "#0  0x00007f7c4c2ed545     clock_nanosleep@GLIBC_2.2.5 - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x000055d689cc92d7 - 1 std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#1}> > >::_M_run() - /opt/prog\n"
    "#2  0x00007f7c4c4d44a3 - 1 - /usr/lib/x86_64-linux-gnu/libstdc++.so.6\n"
    "#3  0x000055d689cc9300 worker_loop - /opt/prog\n"
    "\n";

TEST(thread_frames, reads_eu_stack_output) {
  auto main_thread = thread_frames(eu_stack_text, 3000, 3000);
  ASSERT_EQ(main_thread.size(), 5u);
  EXPECT_EQ(main_thread[0].function, "clock_nanosleep");  // the symbol version dropped
  EXPECT_EQ(main_thread[0].module, "/usr/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_EQ(main_thread[2].function, "wait_for_child");
  EXPECT_EQ(main_thread[2].module, "/opt/prog");
  EXPECT_EQ(frames_signature(main_thread), "wait_for_child | main");
  auto worker = thread_frames(eu_stack_text, 3000, 3001);
  ASSERT_EQ(worker.size(), 4u);
  EXPECT_EQ(worker[1].function, "std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#1}> > >::_M_run");
  EXPECT_EQ(worker[2].function, "??");
  EXPECT_EQ(worker[2].module, "/usr/lib/x86_64-linux-gnu/libstdc++.so.6");
  EXPECT_EQ(frames_signature(worker), "worker_loop");
}

TEST(thread_frames, reads_a_bare_eu_stack_output_without_modules) {
  constexpr const char* bare =
      "PID 3100 - process\n"
      "TID 3101:\n"
      "#0  0x00007f7c4c2ed545 __libc_pause\n"
      "#1  0x0000557be04db159 waiter\n"
      "#2  0x0000557be04db159 outer()\n";
  auto f = thread_frames(bare, 3100, 3101);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(frames_signature(f), "waiter | outer");
}

TEST(parse_stacks, lists_every_thread_and_the_faulted_one_of_a_core_section) {
  constexpr const char* core =
      "=== process 4000 (core) thread 4002 via gdb ===\n"
      "Thread 2 (Thread 0x7f02 (LWP 4001)):\n"
      "#0  0x00007f in __GI___clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6\n"
      "#1  0x000055 in main ()\n"
      "\n"
      "Thread 1 (Thread 0x7f03 (LWP 4002)):\n"
      "#0  0x000055 in pool::release(void*) ()\n"
      "#1  0x000055 in worker() ()\n"
      "\n";
  auto threads = parse_stacks(core);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].pid, 4000);
  EXPECT_EQ(threads[0].tid, 4001);
  EXPECT_FALSE(threads[0].faulted);
  EXPECT_EQ(threads[1].tid, 4002);
  EXPECT_TRUE(threads[1].faulted);
  EXPECT_EQ(frames_signature(threads[1].frames), "pool::release | worker");

  auto all = parse_stacks(gdb_stacks);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].pid, 1002);
  EXPECT_EQ(all[2].tid, 1002);
  EXPECT_EQ(all[2].frames.size(), 3u);
}

TEST(hang_signature, names_where_each_thread_blocks) {
  // Thread 1001 in worker_loop, 1000 in registry::unregister (called from main), process 1002
  // in wait_for_parent: main is nobody's blocking call.
  EXPECT_EQ(hang_signature(gdb_stacks), "registry::unregister | wait_for_parent | worker_loop");
  EXPECT_EQ(hang_signature(gdb_stacks, 2), "registry::unregister | wait_for_parent");
  EXPECT_EQ(hang_signature(eu_stack_text), "wait_for_child | worker_loop");
}

// A hung Python process: gdb sees the interpreter's C frames, py-spy the Python ones. The
// signature names the Python functions where each thread waits (the interpreter's own library,
// threading.py, is its runtime), not the interpreter's C code; another process keeps its C frames.
TEST(hang_signature, names_a_python_process_by_its_python_frames) {
  const std::string text =
      "=== process 4000 (python3) ppid 1 pgrp 4000 state S via gdb ===\n"
      "Thread 1 (Thread 0x7f01 (LWP 4000) \"python3\"):\n"
      "#0  0x00007f in clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6\n"
      "#1  0x000055 in pysleep () from /usr/bin/python3.11\n"
      "#2  0x000055 in _PyEval_EvalFrameDefault () from /usr/bin/python3.11\n"
      "\n"
      "=== process 4000 (python3) ppid 1 pgrp 4000 state S via py-spy ===\n"
      "Thread 4000 (idle): \"MainThread\"\n"
      "    wait_for_the_child (/srv/t/test_ipc.py:12)\n"
      "    <module> (/srv/t/test_ipc.py:20)\n"
      "Thread 4001 (idle): \"pool-worker\"\n"
      "    wait (/usr/lib/python3.11/threading.py:320)\n"
      "    serve (/srv/venv/lib/python3.11/site-packages/pool/server.py:88)\n"
      "    Thread.run (/usr/lib/python3.11/threading.py:982)\n"
      "\n"
      "=== process 4002 (helper) ppid 4000 pgrp 4000 state S via gdb ===\n"
      "Thread 1 (Thread 0x7f02 (LWP 4002) \"helper\"):\n"
      "#0  0x00007f in read () from /lib/x86_64-linux-gnu/libc.so.6\n"
      "#1  0x000055 in wait_for_parent () from /opt/helper\n";
  const auto threads = parse_stacks(text);
  ASSERT_EQ(threads.size(), 4u);
  EXPECT_FALSE(threads[0].python);
  EXPECT_TRUE(threads[1].python);
  EXPECT_EQ(threads[1].tid, 4000);
  ASSERT_EQ(threads[1].frames.size(), 2u);
  EXPECT_EQ(threads[1].frames[0].function, "wait_for_the_child");
  EXPECT_EQ(threads[1].frames[0].module, "/srv/t/test_ipc.py");
  EXPECT_EQ(threads[2].frames[2].function, "Thread.run");
  EXPECT_EQ(hang_signature(text), "serve | wait_for_parent | wait_for_the_child");
}

// An agent dump of a hung pool: main drains a queue, two workers wait for work, a CUDA runtime
// thread polls, one thread did not answer. P, T and A stand for the pid, the first tid and an
// address part, which differ from run to run.
std::string hung_pool_dump(int pid, int tid, const std::string& a) {
  std::string text =
      "=== process P (pool) ppid 1 pgrp P state S via agent ===\n"
      "thread T0 pool\n"
      "#0 0x7fA /lib/x86_64-linux-gnu/libc.so.6+0x9fA __futex_abstimed_wait_common\n"
      "#1 0x55A /opt/prog+0x3A drain_queue\n"
      "#2 0x55A /opt/prog+0x4A main\n"
      "\n"
      "thread T1 pool\n"
      "#0 0x7fA /lib/x86_64-linux-gnu/libc.so.6+0x9fA pthread_cond_wait\n"
      "#1 0x55A /opt/prog+0x1A std::condition_variable::wait(std::unique_lock<std::mutex>&)\n"
      "#2 0x55A /opt/prog+0x2A worker_loop()\n"
      "#3 0x7fA /lib/x86_64-linux-gnu/libc.so.6+0x89A start_thread\n"
      "\n"
      "thread T2 pool\n"
      "#0 0x7fA /lib/x86_64-linux-gnu/libc.so.6+0x9fA pthread_cond_wait\n"
      "#1 0x55A /opt/prog+0x2A worker_loop()\n"
      "\n"
      "thread T3 cuda-EvtHandlr\n"
      "#0 0x7fA /lib/x86_64-linux-gnu/libc.so.6+0x11A poll\n"
      "#1 0x7fA /usr/lib/x86_64-linux-gnu/libcuda.so.1+0x3A ??\n"
      "\n"
      "thread T4 pool\n"
      "\n"
      "end\n";
  auto put = [&](const std::string& key, const std::string& value) {
    for (auto at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  };
  for (int k = 4; k >= 0; --k) put("T" + std::to_string(k), std::to_string(tid + k));
  put("P", std::to_string(pid));
  put("A", a);
  return text;
}

TEST(hang_signature, dedupes_drops_threads_without_program_frames_and_ignores_ids) {
  const std::string run1 = hung_pool_dump(5000, 5000, "100");
  const std::string run2 = hung_pool_dump(7321, 7321, "2a0");
  ASSERT_EQ(parse_stacks(run1).size(), 5u);
  EXPECT_EQ(hang_signature(run1), "drain_queue | worker_loop");
  EXPECT_EQ(hang_signature(run2), hang_signature(run1));
  EXPECT_EQ(hang_signature("=== process 1 (x) ppid 0 pgrp 1 state S via proc ===\nthread 1 x state S wchan do_wait\n"),
            "");
}

// gdb's capture of a program hung under a lock/ point: the lock wrapper's frames and the agent's
// start-up frame have debug info, so gdb names them but gives them no module; the section's
// `info proc mappings` places them in faultline's libraries. The program (no debug info) blocks
// in worker_step; its second process sleeps in an exit/end delay, inside the agent only.
constexpr const char* gdb_with_mappings =
    "=== process 1000 (prog) ppid 1 pgrp 1000 state S via gdb ===\n"
    "Thread 1 (Thread 0x7f00 (LWP 1000) \"prog\"):\n"
    "#0  __futex_abstimed_wait_common (futex_word=0x7f1) at ./nptl/futex-internal.c:57\n"
    "#1  0x00007f0000112345 in do_futex_wait (sem=0x7f1) at ./nptl/sem_waitcommon.c:111\n"
    "#2  0x00007f0000400120 in operator() (__closure=<synthetic pointer>) at ../faults/preload/lock_points.cc:207\n"
    "#3  (anonymous namespace)::waiting<sem_t, sem_wait(sem_t*)::<lambda()> > (wait_point=0x7f0 \"lock/sem/wait\") at ../faults/preload/lock_points.cc:152\n"
    "#4  sem_wait (s=0x7f1) at ../faults/preload/lock_points.cc:207\n"
    "#5  0x0000555500001180 in worker_step() ()\n"
    "#6  0x0000555500001250 in main ()\n"
    "#7  0x00007f0000500c47 in (anonymous namespace)::wrapped_main (argc=1, argv=0x7ffe, envp=<optimized out>) at ../faults/preload/preload.cc:128\n"
    "#8  0x00007f000012a24a in __libc_start_call_main (main=...) at ../sysdeps/nptl/libc_start_call_main.h:58\n"
    "process 1000\n"
    "Mapped address spaces:\n"
    "\n"
    "          Start Addr           End Addr       Size     Offset  Perms  objfile\n"
    "      0x555500000000     0x555500001000     0x1000        0x0  r--p   /opt/app/prog\n"
    "      0x555500001000     0x555500002000     0x1000     0x1000  r-xp   /opt/app/prog\n"
    "      0x7f0000100000     0x7f0000126000    0x26000        0x0  r--p   /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "      0x7f0000126000     0x7f000027c000   0x156000    0x26000  r-xp   /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "      0x7f0000400000     0x7f0000410000    0x10000        0x0  r-xp   /opt/faultline/lib/libfaultline_lock_points.so\n"
    "      0x7f0000500000     0x7f0000510000    0x10000        0x0  r-xp   /opt/faultline/lib/libfaultline_agent.so\n"
    "[Inferior 1 (process 1000) detached]\n"
    "\n"
    "=== process 1001 (prog) ppid 1000 pgrp 1000 state S via gdb ===\n"
    "Thread 1 (Thread 0x7f01 (LWP 1001) \"prog\"):\n"
    "#0  0x00007f0000113456 in clock_nanosleep () from /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x00007f0000500300 in (anonymous namespace)::hit_exit_point (plan=..., name=0x7f0 \"exit/end\") at ../faults/preload/preload.cc:66\n"
    "#2  0x00007f0000500400 in (anonymous namespace)::exit_end_handler () at ../faults/preload/preload.cc:71\n"
    "#3  0x00007f0000114000 in __run_exit_handlers () from /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "Mapped address spaces:\n"
    "      0x7f0000100000     0x7f000027c000   0x17c000        0x0  /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "      0x7f0000500000     0x7f0000510000    0x10000        0x0  /opt/faultline/lib/libfaultline_agent.so\n";

TEST(parse_stacks, places_gdb_frames_without_a_module_by_the_sections_mappings) {
  auto all = parse_stacks(gdb_with_mappings);
  ASSERT_EQ(all.size(), 2u);
  ASSERT_EQ(all[0].frames.size(), 9u);
  EXPECT_EQ(all[0].frames[0].module, "");  // no address printed
  EXPECT_EQ(all[0].frames[1].module, "/usr/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_EQ(all[0].frames[1].offset, 0x12345u);
  EXPECT_EQ(all[0].frames[2].module, "/opt/faultline/lib/libfaultline_lock_points.so");
  EXPECT_EQ(all[0].frames[2].offset, 0x120u);
  // Frames 3 and 4 hold what frame 2 was inlined into: gdb prints no address for them.
  for (std::size_t k : {3u, 4u}) {
    EXPECT_EQ(all[0].frames[k].module, "/opt/faultline/lib/libfaultline_lock_points.so") << k;
    EXPECT_EQ(all[0].frames[k].offset, 0x120u) << k;
  }
  EXPECT_EQ(all[0].frames[5].module, "/opt/app/prog");
  EXPECT_EQ(all[0].frames[5].offset, 0x1180u);
  EXPECT_TRUE(all[0].frames[5].has_offset);
  EXPECT_EQ(all[0].frames[7].module, "/opt/faultline/lib/libfaultline_agent.so");
  // A section's mappings place only its own frames; gdb's "from" stays as it was.
  EXPECT_EQ(all[1].frames[0].module, "/usr/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_FALSE(all[1].frames[0].has_offset);
  EXPECT_EQ(all[1].frames[1].module, "/opt/faultline/lib/libfaultline_agent.so");
}

TEST(hang_signature, skips_every_frame_of_faultlines_own_libraries) {
  // Not "operator() | ..." (the lock wrapper's lambda), nor the wrapper it was inlined into
  // (waiting<...>, sem_wait), nor wrapped_main or hit_exit_point.
  EXPECT_EQ(hang_signature(gdb_with_mappings), "worker_step");
}

TEST_F(classify_dir, hang_inside_faultlines_frames_only_is_named_where_it_blocks_in_the_runtime) {
  // Only the second process of gdb_with_mappings, as the leader: agent and libc frames.
  const std::string text = gdb_with_mappings;
  write(stacks_file, text.substr(text.find("=== process 1001")));
  e_.leader = 1001;
  e_.stacks_path = dir_ / stacks_file;
  e_.timed_out = true;
  e_.wait_status = killed(SIGKILL);
  EXPECT_EQ(classify(e_).signature, "hang: libc.so.6");
}

TEST(meaningful, skips_every_library_faultline_puts_into_a_process_whatever_the_name) {
  for (const char* module : {"/opt/faultline/lib/libfaultline_agent.so", "/opt/faultline/lib/libfaultline_lock_points.so",
                             "/usr/lib/fiu/fiu_posix_preload.so", "/usr/lib/fiu/fiu_run_preload.so",
                             "/usr/lib/x86_64-linux-gnu/libfiu.so.1"}) {
    EXPECT_TRUE(faultline_module(module)) << module;
    EXPECT_FALSE(meaningful({"operator()", module, 0x10, true})) << module;
    EXPECT_FALSE(meaningful({"(anonymous namespace)::hit", module, 0x10, true})) << module;
  }
  EXPECT_FALSE(faultline_module("/opt/app/prog"));
  EXPECT_TRUE(meaningful({"operator()", "/opt/app/prog", 0x10, true}));
}

TEST(frames_signature, a_stack_of_faultline_and_runtime_frames_is_named_by_the_runtime) {
  const std::vector<frame> frames = {{"??", "/opt/faultline/lib/libfaultline_agent.so", 0x10, true},
                                     {"??", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x20, true}};
  EXPECT_EQ(frames_signature(frames), "libc.so.6+0x20");
}

TEST(find_invariant, names_the_first_violated_invariant) {
  EXPECT_EQ(find_invariant("setup\ninvariant violated: pool/free-plus-live: 10 != 12\nmore\n"), "pool/free-plus-live");
  EXPECT_EQ(find_invariant("invariant violated: no-hang\n"), "no-hang");
  EXPECT_FALSE(find_invariant("all good\n"));
}

TEST_F(classify_dir, clean_exit_is_a_pass) {
  e_.wait_status = exited(0);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::pass);
  EXPECT_EQ(c.when, phase::none);
  EXPECT_EQ(c.exit_code, 0);
  EXPECT_EQ(c.signature, "");
}

constexpr const char* late_cuda_text =
    "call cudaEventSynchronize 4\n"
    "#0 0x7f0000010000 /opt/lib/libfaultline_agent.so+0x10000 faultline::agent::record_late_cuda(char const*, int)\n"
    "#1 0x7f0000020000 /usr/local/cuda/lib64/libcupti.so.13+0x20000 ??\n"
    "#2 0x7f0000030000 /opt/app/lib/librmm.so+0x30000 cudaEventSynchronize\n"
    "#3 0x7f0000040000 /opt/app/lib/librmm.so+0x40000 rmm::mr::pool_memory_resource::release()\n"
    "#4 0x7f0000050000 /opt/app/bin/client+0x500 pool_holder::~pool_holder()\n"
    "#5 0x7f0000001000 /lib/x86_64-linux-gnu/libc.so.6+0x1000 __run_exit_handlers\n"
    "\n"
    "call cuEventDestroy_v2 4\n"
    "#0 0x7f0000010000 /opt/lib/libfaultline_agent.so+0x10000 faultline::agent::record_late_cuda(char const*, int)\n"
    "\n";

TEST_F(classify_dir, a_late_cuda_call_fails_a_clean_exit_in_the_exit_phase_named_by_its_callers) {
  e_.wait_status = exited(0);
  write("late-cuda.1000", late_cuda_text);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::fail);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signature, "late-cuda: cudaEventSynchronize \u2190 cudaEventSynchronize | rmm::mr::pool_memory_resource::release");
}

TEST_F(classify_dir, a_crash_keeps_its_verdict_beside_late_cuda_calls) {
  e_.wait_status = killed(SIGSEGV);
  write("late-cuda.1000", late_cuda_text);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::crash);
}

TEST_F(classify_dir, nonzero_exit_names_the_invariant) {
  write("run.log", "starting\ninvariant violated: registry/generation: released gen 3 under gen 4\n");
  e_.wait_status = exited(1);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::fail);
  EXPECT_EQ(c.when, phase::run);
  EXPECT_EQ(c.signature, "registry/generation");
}

TEST_F(classify_dir, failure_after_work_end_is_in_the_exit_phase) {
  write("phase.1000", "run\nwork-end\nmain-returned\n");
  e_.wait_status = exited(3);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::fail);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signature, "exit 3");
}

TEST_F(classify_dir, failure_with_only_main_returned_stays_in_the_run_phase) {
  write("phase.1000", "run\nmain-returned\nexit\n");
  e_.wait_status = exited(1);
  EXPECT_EQ(classify(e_).when, phase::run);
}

TEST_F(classify_dir, crash_report_gives_signal_frames_and_phase) {
  write("crash.1000", crash_text);
  write("phase.1000", "run\nmain-returned\nexit\n");
  e_.wait_status = killed(SIGSEGV);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::crash);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signal, SIGSEGV);
  EXPECT_FALSE(c.exit_code);
  EXPECT_EQ(c.signature, "SIGSEGV: pool::release | pool::destroy | main");
}

TEST_F(classify_dir, crash_during_work_is_in_the_run_phase) {
  write("crash.1000", crash_text);
  write("phase.1000", "run\n");
  e_.wait_status = killed(SIGSEGV);
  EXPECT_EQ(classify(e_).when, phase::run);
}

TEST_F(classify_dir, a_childs_crash_report_makes_a_crash_even_when_the_leader_exits_zero) {
  write("crash.1005", "signal 6 SIGABRT\nthread 1005\n#0 0x1 /opt/prog+0x10 check_failed\n");
  e_.wait_status = exited(0);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::crash);
  EXPECT_EQ(c.signal, SIGABRT);
  EXPECT_EQ(c.exit_code, 0);
  EXPECT_EQ(c.signature, "SIGABRT: check_failed");
}

// crash-stacks.txt as the runner writes it while a crashing process waits in the agent's
// handler (stop mode): the crashing thread 1001 has the handler's frames on top.
constexpr const char* stopped_crash_stacks =
    "=== process 1000 (prog) ppid 1 pgrp 1000 state T via gdb ===\n"
    "Thread 2 (Thread 0x7f01 (LWP 1001) \"worker\"):\n"
    "#0  0x00007f in kill () from /lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x00007f in faultline::agent::detail::on_crash(int, siginfo_t*, void*) () from /opt/lib/libfaultline_agent.so\n"
    "#2  <signal handler called>\n"
    "#3  0x000055 in pool::release(void*) ()\n"
    "#4  0x000055 in worker() ()\n"
    "#5  0x00007f in start_thread (arg=<optimized out>) at ./nptl/pthread_create.c:442\n"
    "#6  0x00007f in clone3 () at ../sysdeps/unix/sysv/linux/x86_64/clone3.S:81\n"
    "\n"
    "Thread 1 (Thread 0x7f00 (LWP 1000) \"prog\"):\n"
    "#0  0x00007f in clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6\n"
    "#1  0x000055 in main ()\n"
    "\n";

// crash.PID in minimal/stop mode: the header and the faulting frame only.
constexpr const char* minimal_crash = "signal 11 SIGSEGV\nthread 1001 worker\n#0 0x55d4c3a1b2c0 /opt/app/bin/prog+0x12c0 ??\n";

TEST_F(classify_dir, crash_takes_the_crashing_threads_frames_from_crash_stacks) {
  write("crash.1000", minimal_crash);
  write(agent::crash_stacks_file, stopped_crash_stacks);
  e_.crash_stacks_path = dir_ / agent::crash_stacks_file;
  e_.wait_status = killed(SIGSEGV);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::crash);
  EXPECT_EQ(c.signature, "SIGSEGV: pool::release | worker");
  // The stack a person reads first: the crashing thread below the agent's handler, every frame.
  EXPECT_EQ(c.top_frames, (std::vector<std::string>{"pool::release", "worker", "start_thread", "clone3"}));
}

TEST_F(classify_dir, a_hang_shows_the_stack_of_a_thread_blocked_in_the_program) {
  write(stacks_file, gdb_with_mappings);
  e_.stacks_path = dir_ / stacks_file;
  e_.timed_out = true;
  e_.wait_status = killed(SIGKILL);
  auto c = classify(e_);
  EXPECT_EQ(c.signature, "hang: worker_step");
  ASSERT_EQ(c.top_frames.size(), top_frames_kept);
  EXPECT_EQ(c.top_frames[0], "__futex_abstimed_wait_common");
  EXPECT_EQ(c.top_frames[1], "do_futex_wait  (libc.so.6)");
  EXPECT_EQ(c.top_frames[2], "operator()  (libfaultline_lock_points.so)");
  EXPECT_EQ(c.top_frames[4], "sem_wait  (libfaultline_lock_points.so)");
  EXPECT_EQ(c.top_frames[5], "worker_step  (prog)");
  // Only faultline's and the runtime's frames: the leader's stack.
  const std::string text = gdb_with_mappings;
  write(stacks_file, text.substr(text.find("=== process 1001")));
  e_.leader = 1001;
  c = classify(e_);
  EXPECT_EQ(c.top_frames, (std::vector<std::string>{"clock_nanosleep  (libc.so.6)", "(anonymous namespace)::hit_exit_point  (libfaultline_agent.so)",
                                                    "(anonymous namespace)::exit_end_handler  (libfaultline_agent.so)",
                                                    "__run_exit_handlers  (libc.so.6)"}));
  // No stacks, no frames; other outcomes have none.
  e_.stacks_path.clear();
  EXPECT_TRUE(classify(e_).top_frames.empty());
}

TEST(top_frame_lines, names_module_and_offset_of_unnamed_frames_and_stops_at_the_limit) {
  const std::vector<frame> frames = {{"on_crash", "/opt/lib/libfaultline_agent.so", 0x10, true},
                                     {"<signal handler called>", "", 0, false},
                                     {"??", "/opt/app/prog", 0x1234, true},
                                     {"main", "/opt/app/prog", 0x1300, true},
                                     {"??", "", 0, false}};
  EXPECT_EQ(top_frame_lines(frames), (std::vector<std::string>{"??  (prog+0x1234, no symbol)", "main  (prog)", "??"}));
  EXPECT_EQ(top_frame_lines(frames, 1), (std::vector<std::string>{"??  (prog+0x1234, no symbol)"}));
  // A hang's stack keeps its handler's frames: the thread may block there.
  EXPECT_EQ(top_frame_lines(frames, 3, false),
            (std::vector<std::string>{"on_crash  (libfaultline_agent.so)", "<signal handler called>", "??  (prog+0x1234, no symbol)"}));
}

// Issue 38 (11): a hang under a `sh -c` wrapper was signed "hang: dash+0xbcc0", the stripped
// shell's frame, beside or instead of the program's. A thread whose program frames have no name
// is named by its module, and only when no thread is named by a function.
constexpr const char* sh_wrapper_stacks =
    "=== process 100 (sh) ppid 1 pgrp 100 state S via agent ===\n"
    "thread 100 sh\n"
    "#0 0x7f01 /lib/x86_64-linux-gnu/libc.so.6+0xe4a3a wait4\n"
    "#1 0x5501 /usr/bin/dash+0xbcc0 ??\n"
    "#2 0x5502 /usr/bin/dash+0x4100 ??\n"
    "\n";
constexpr const char* wrapped_program_stacks =
    "=== process 101 (prog) ppid 100 pgrp 100 state S via agent ===\n"
    "thread 101 prog\n"
    "#0 0x7f02 /lib/x86_64-linux-gnu/libc.so.6+0x100 read\n"
    "#1 0x5503 /opt/child+0x200 ??\n"
    "#2 0x5504 /opt/child+0x300 wait_for_parent()\n"
    "#3 0x5505 /opt/child+0x400 main\n"
    "\n";

TEST(hang_signature, a_stripped_wrapper_is_named_by_its_module_and_never_hides_the_program) {
  EXPECT_EQ(hang_signature(sh_wrapper_stacks), "dash (no symbols)");
  // The program's named frame wins over its own unnamed one above it, and over the wrapper.
  EXPECT_EQ(hang_signature(std::string(sh_wrapper_stacks) + wrapped_program_stacks), "wait_for_parent");
}

TEST_F(classify_dir, a_hang_under_a_wrapper_shows_the_programs_stack_and_says_what_has_no_symbol) {
  write(stacks_file, std::string(sh_wrapper_stacks) + wrapped_program_stacks);
  e_.stacks_path = dir_ / stacks_file;
  e_.leader = 100;
  e_.timed_out = true;
  e_.wait_status = killed(SIGKILL);
  auto c = classify(e_);
  EXPECT_EQ(c.signature, "hang: wait_for_parent");
  ASSERT_GE(c.top_frames.size(), 3u);
  EXPECT_EQ(c.top_frames[0], "read  (libc.so.6)");
  EXPECT_EQ(c.top_frames[1], "??  (child+0x200, no symbol)");
  EXPECT_EQ(c.top_frames[2].rfind("wait_for_parent", 0), 0u) << c.top_frames[2];
  // The wrapper alone.
  write(stacks_file, sh_wrapper_stacks);
  c = classify(e_);
  EXPECT_EQ(c.signature, "hang: dash (no symbols)");
  ASSERT_GE(c.top_frames.size(), 2u);
  EXPECT_EQ(c.top_frames[1], "??  (dash+0xbcc0, no symbol)");
}

TEST_F(classify_dir, crash_falls_back_to_the_crash_file_without_the_thread_or_the_file) {
  write("crash.1000", minimal_crash);
  e_.wait_status = killed(SIGSEGV);
  e_.crash_stacks_path = dir_ / agent::crash_stacks_file;  // not written
  EXPECT_EQ(classify(e_).signature, "SIGSEGV: prog+0x12c0");
  // The file holds other threads only, none of them in a handler.
  write(agent::crash_stacks_file,
        "=== process 1000 (prog) ppid 1 pgrp 1000 state T via gdb ===\n"
        "Thread 1 (Thread 0x7f00 (LWP 1000) \"prog\"):\n"
        "#0  0x00007f in clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6\n"
        "#1  0x000055 in main ()\n");
  EXPECT_EQ(classify(e_).signature, "SIGSEGV: prog+0x12c0");
}

TEST_F(classify_dir, crash_in_a_pid_namespace_finds_the_thread_stopped_in_the_handler) {
  // The agent numbers itself inside the run's PID namespace (pid 2, tid 3); gdb, outside it,
  // sees 1000 and 1001.
  write("crash.2", "signal 11 SIGSEGV\nthread 3 worker\n#0 0x55d4c3a1b2c0 /opt/app/bin/prog+0x12c0 ??\n");
  write("phase.2", "run\nmain-returned\nexit\n");
  write(agent::crash_stacks_file, stopped_crash_stacks);
  e_.crash_stacks_path = dir_ / agent::crash_stacks_file;
  e_.wait_status = killed(SIGSEGV);
  auto c = classify(e_);
  EXPECT_EQ(c.signature, "SIGSEGV: pool::release | worker");
  EXPECT_EQ(c.when, phase::exit);
}

TEST_F(classify_dir, crash_read_from_a_core_needs_no_crash_file) {
  write(agent::crash_stacks_file,
        "=== process 1000 (core) thread 1001 via gdb ===\n"
        "Thread 2 (Thread 0x7f00 (LWP 1000)):\n"
        "#0  0x00007f in __GI___clock_nanosleep () from /lib/x86_64-linux-gnu/libc.so.6\n"
        "#1  0x000055 in main ()\n"
        "\n"
        "Thread 1 (Thread 0x7f01 (LWP 1001)):\n"
        "#0  0x000055 in (anonymous namespace)::nodebug_worker_touch(int) ()\n"
        "#1  0x00007f in ?? () from /lib/x86_64-linux-gnu/libstdc++.so.6\n"
        "#2  0x00007f in start_thread () from /lib/x86_64-linux-gnu/libc.so.6\n"
        "\n");
  write("phase.1000", "run\nmain-returned\n");
  e_.crash_stacks_path = dir_ / agent::crash_stacks_file;
  e_.wait_status = killed(SIGSEGV);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::crash);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signature, "SIGSEGV: (anonymous namespace)::nodebug_worker_touch");
}

TEST_F(classify_dir, crash_entirely_inside_a_runtime_is_named_by_module_and_offset) {
  write("crash.1000",
        "signal 11 SIGSEGV\nthread 1000\n"
        "#0 0x7f0000001234 /usr/lib/x86_64-linux-gnu/libcuda.so.1+0x1234 ??\n"
        "#1 0x7f0000005678 /usr/lib/x86_64-linux-gnu/libcuda.so.1+0x5678 ??\n"
        "#2 0x7f0000003000 /lib/x86_64-linux-gnu/libc.so.6+0x3000 __run_exit_handlers\n");
  // gdb saw the same thread, without offsets: the crash file's offset makes the signature.
  write(agent::crash_stacks_file,
        "=== process 1000 (prog) ppid 1 pgrp 1000 state T via gdb ===\n"
        "Thread 1 (Thread 0x7f00 (LWP 1000) \"prog\"):\n"
        "#0  0x00007f in kill () from /lib/x86_64-linux-gnu/libc.so.6\n"
        "#1  <signal handler called>\n"
        "#2  0x00007f in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1\n");
  e_.crash_stacks_path = dir_ / agent::crash_stacks_file;
  e_.wait_status = killed(SIGSEGV);
  EXPECT_EQ(classify(e_).signature, "SIGSEGV: libcuda.so.1+0x1234");
}

TEST_F(classify_dir, signal_without_report_is_a_crash_named_by_the_signal) {
  e_.wait_status = killed(SIGBUS);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::crash);
  EXPECT_EQ(c.when, phase::run);
  EXPECT_EQ(c.signature, "SIGBUS");
}

TEST_F(classify_dir, gtest_that_finished_and_then_crashed_is_in_the_exit_phase) {
  // The runner created the premature-exit file; gtest deleted it when its tests were done.
  e_.premature_exit_armed = true;
  e_.wait_status = killed(SIGSEGV);
  EXPECT_EQ(classify(e_).when, phase::exit);
  write(premature_exit_file, "");
  EXPECT_EQ(classify(e_).when, phase::run);  // still there: the program never finished
}

TEST_F(classify_dir, gtest_xml_all_passed_puts_a_failure_at_exit) {
  write(gtest_xml_file, "<?xml version=\"1.0\"?>\n<testsuites tests=\"2\" failures=\"0\" disabled=\"0\" errors=\"0\" name=\"AllTests\">\n</testsuites>\n");
  e_.wait_status = exited(1);
  EXPECT_EQ(classify(e_).when, phase::exit);
  write(gtest_xml_file, "<testsuites tests=\"2\" failures=\"1\" disabled=\"0\" errors=\"0\" name=\"AllTests\">\n</testsuites>\n");
  EXPECT_EQ(classify(e_).when, phase::run);
}

TEST_F(classify_dir, timeout_is_a_hang_named_by_where_its_threads_block) {
  write(stacks_file, gdb_stacks);
  e_.stacks_path = dir_ / stacks_file;
  e_.timed_out = true;
  e_.wait_status = killed(SIGTERM);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::hang);
  EXPECT_EQ(c.when, phase::run);
  // Every thread of the tree, not the leader's main thread's "registry::unregister | main".
  EXPECT_EQ(c.signature, "hang: registry::unregister | wait_for_parent | worker_loop");
}

TEST_F(classify_dir, hang_entirely_inside_a_runtime_is_named_by_its_module) {
  write(stacks_file,
        "=== process 1000 (prog) ppid 1 pgrp 1000 state S via gdb ===\n"
        "Thread 1 (Thread 0x7f00 (LWP 1000) \"prog\"):\n"
        "#0  0x00007f in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
        "#1  0x00007f in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1\n");
  e_.stacks_path = dir_ / stacks_file;
  e_.timed_out = true;
  e_.wait_status = killed(SIGKILL);
  EXPECT_EQ(classify(e_).signature, "hang: libcuda.so.1");
}

TEST_F(classify_dir, hang_without_stacks_is_plain_hang_and_markers_give_the_phase) {
  write("phase.1000", "run\nwork-end\n");
  e_.timed_out = true;
  e_.wait_status = killed(SIGKILL);
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::hang);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signature, "hang");
}

TEST_F(classify_dir, survivors_after_a_clean_exit_are_a_leak) {
  e_.wait_status = exited(0);
  e_.leaked_pids = {2001, 2002};
  e_.leaked_comms = {"sleep", "daemon"};
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::leak);
  EXPECT_EQ(c.when, phase::exit);
  EXPECT_EQ(c.signature, "leak: daemon,sleep");
}

TEST_F(classify_dir, shared_memory_left_behind_is_a_leak) {
  e_.wait_status = exited(0);
  e_.leaked_shm = {"faultline-acct-1"};
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::leak);
  EXPECT_EQ(c.signature, "leak: /dev/shm/faultline-acct-1");
}

TEST_F(classify_dir, a_crash_outranks_a_leak_and_a_hang_outranks_a_crash) {
  e_.wait_status = killed(SIGSEGV);
  e_.leaked_pids = {2001};
  EXPECT_EQ(classify(e_).result, outcome::crash);
  e_.timed_out = true;
  EXPECT_EQ(classify(e_).result, outcome::hang);
}

TEST_F(classify_dir, spawn_failure_is_an_error) {
  e_.spawn_failed = true;
  e_.spawn_error = "spawn ./nope: No such file or directory";
  auto c = classify(e_);
  EXPECT_EQ(c.result, outcome::error);
  EXPECT_EQ(c.signature, "error: spawn ./nope: No such file or directory");
}

// fl_testdata_nodebug_crash (harness/testdata) has no DWARF and exports no symbols: the agent
// can only write "??" for its frames. Its --offset prints nodebug_worker_touch's OFFSET.
TEST_F(classify_dir, names_a_static_function_of_a_program_built_without_debug_info) {
  const fs::path prog = detail::self_dir() / "fl_testdata_nodebug_crash";
  ASSERT_TRUE(fs::exists(prog)) << prog << " is missing: build fl_testdata_nodebug_crash";
  auto r = run_tool({prog.string(), "--offset"}, std::chrono::seconds(10));
  ASSERT_TRUE(r) << r.error().message();
  unsigned long long offset = 0;
  ASSERT_EQ(std::sscanf(r->output.c_str(), "nodebug_worker_touch 0x%llx", &offset), 1) << r->output;
  char frame0[64];
  std::snprintf(frame0, sizeof frame0, "+0x%llx ??\n", offset + 4);  // the store, inside the function
  const std::string text = "signal 11 SIGSEGV\nthread 1001 fl_testdata_nod\n#0 0x5600000013 " + prog.string() + frame0 +
                           "#1 0x7f00000044a3 /lib/x86_64-linux-gnu/libstdc++.so.6+0xd44a3 ??\n"
                           "#2 0x7f00000071f5 /lib/x86_64-linux-gnu/libc.so.6+0x891f5 ??\n";
  auto report = parse_crash(text);
  ASSERT_TRUE(report);
  symbolise(report->frames);
  EXPECT_EQ(report->frames[0].function, "(anonymous namespace)::nodebug_worker_touch");
  EXPECT_EQ(frames_signature(report->frames), "(anonymous namespace)::nodebug_worker_touch");
  write("crash.1000", text);
  e_.wait_status = killed(SIGSEGV);
  EXPECT_EQ(classify(e_).signature, "SIGSEGV: (anonymous namespace)::nodebug_worker_touch");
}

// A process in group-stop, as a crashing process stops itself in the agent's handler.
class stopped_process : public ::testing::Test {
 protected:
  void SetUp() override {
    spawn_options o;
    o.argv = {"sleep", "60"};
    o.envp = current_environment();
    auto c = spawn(o);
    ASSERT_TRUE(c) << c.error().message();
    child_ = std::move(*c);
    ASSERT_TRUE(child_.signal(SIGSTOP));
    ASSERT_TRUE(wait_state([](char s) { return s == 'T'; }));
    out_ = fs::temp_directory_path() / ("fl_stacks_test." + std::to_string(::getpid()) + ".txt");
  }
  void TearDown() override {
    if (child_.pid() > 0) {
      child_.signal(SIGKILL);
      child_.reap();
    }
    std::error_code ec;
    fs::remove(out_, ec);
  }
  template <class Pred>
  bool wait_state(Pred pred) {
    for (int i = 0; i < 250; ++i) {
      auto st = detail::read_stat(child_.pid());
      if (st && pred(st->state)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Captures with `method`, checks the section, and that the process is still stopped after.
  void capture_and_check(stack_method method, std::string_view via) {
    const pid_t pid = child_.pid();
    auto st = detail::read_stat(pid);
    ASSERT_TRUE(st);
    stack_options o;
    o.method = method;
    auto s = capture_stacks_outside({*st}, out_, o, faulted_thread{pid, pid});
    ASSERT_TRUE(s) << s.message();
    auto text = detail::read_file(out_);
    ASSERT_TRUE(text);
    EXPECT_NE(text->find("thread " + std::to_string(pid) + " via " + std::string(via) + " ==="), std::string::npos)
        << *text;
    auto threads = parse_stacks(*text);
    ASSERT_EQ(threads.size(), 1u) << *text;
    EXPECT_EQ(threads[0].tid, pid);
    EXPECT_TRUE(threads[0].faulted);
    EXPECT_FALSE(threads[0].frames.empty()) << *text;
    // Still stopped once the tool has detached (the kernel keeps the stop), and SIGCONT
    // resumes it: the stop is the caller's to end.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(detail::read_stat(pid)->state, 'T');
    ASSERT_TRUE(child_.signal(SIGCONT));
    EXPECT_TRUE(wait_state([](char c) { return c != 'T'; }));
  }

  child child_;
  fs::path out_;
};

TEST_F(stopped_process, gdb_leaves_it_stopped) {
  if (!gdb_available()) GTEST_SKIP() << "gdb is not on PATH";
  capture_and_check(stack_method::gdb, "gdb");
}

TEST_F(stopped_process, eu_stack_leaves_it_stopped) {
  if (!eu_stack_program()) GTEST_SKIP() << "eu-stack (elfutils) is not installed";
  capture_and_check(stack_method::eu_stack, "eu-stack");
}

TEST_F(stopped_process, automatic_capture_never_signals_it) {
  if (!outside_capture_available()) GTEST_SKIP() << "neither gdb nor eu-stack is installed";
  capture_and_check(stack_method::automatic, gdb_available() ? "gdb" : eu_stack_program() ? "eu-stack" : "libdwfl");
}

TEST(capture_stacks_outside, takes_eu_stack_from_the_environment_and_refuses_in_process_methods) {
  const fs::path dir = fs::temp_directory_path() / ("fl_eu_stack_env." + std::to_string(::getpid()));
  fs::create_directories(dir);
  // A stand-in eu-stack that prints what `eu-stack -m -i -p PID` prints.
  const fs::path fake = dir / "eu-stack";
  std::ofstream(fake) << "#!/bin/sh\n"
                         "echo \"PID $4 - process\"\n"
                         "echo \"TID $4:\"\n"
                         "echo \"#0  0x00007f7c4c2ed545 clock_nanosleep@GLIBC_2.2.5 - /usr/lib/x86_64-linux-gnu/libc.so.6\"\n"
                         "echo \"#1  0x000055d689cc9150 worker_loop() - /opt/prog\"\n";
  fs::permissions(fake, fs::perms::owner_all);
  ::setenv(eu_stack_env, fake.c_str(), 1);
  EXPECT_EQ(eu_stack_program(), fake);
  auto self = detail::read_stat(::getpid());
  ASSERT_TRUE(self);
  stack_options o;
  o.method = stack_method::eu_stack;
  auto s = capture_stacks_outside({*self}, dir / "crash-stacks.txt", o);
  ::unsetenv(eu_stack_env);
  ASSERT_TRUE(s) << s.message();
  auto text = detail::read_file(dir / "crash-stacks.txt");
  ASSERT_TRUE(text);
  EXPECT_NE(text->find(" via eu-stack ===\nPID " + std::to_string(::getpid()) + " - process\n"), std::string::npos) << *text;
  EXPECT_EQ(frames_signature(thread_frames(*text, ::getpid(), ::getpid())), "worker_loop");

  for (auto m : {stack_method::agent, stack_method::proc, stack_method::none}) {
    o.method = m;
    auto refused = capture_stacks_outside({*self}, dir / "x.txt", o);
    EXPECT_EQ(refused.code(), core::errc::invalid_argument) << to_string(m);
  }
  EXPECT_FALSE(fs::exists(dir / "x.txt"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace faultline::harness

namespace faultline::harness {
namespace {

TEST(core_info, names_the_current_thread_that_gdb_reports) {
  const std::string text =
      "Core was generated by `/bin/prog --x'.\n"
      "Program terminated with signal SIGSEGV, Segmentation fault.\n"
      "#0  0x1 in worker () at w.cc:3\n"
      "[Current thread is 2 (Thread 0x7f (LWP 4242))]\n"
      "\nThread 2 (Thread 0x7f (LWP 4242)):\n#0  0x1 in worker () at w.cc:3\n"
      "\nThread 1 (Thread 0x7e (LWP 4240)):\n#0  0x2 in main () at m.cc:9\n";
  const core_info info = parse_core_info(text);
  EXPECT_EQ(info.executable, "/bin/prog");
  EXPECT_EQ(info.thread, 4242);
}

TEST(core_info, a_single_thread_without_current_thread_line_is_found_by_its_first_frame) {
  // gdb prints no "[Current thread is ...]" when the process had one thread.
  const std::string text =
      "Core was generated by `/bin/prog'.\n"
      "Program terminated with signal SIGSEGV, Segmentation fault.\n"
      "#0  0x000055f49fa6519e in crash_in_work_frame () at c.cc:9\n"
      "9\t  *target = 1;\n"
      "\nThread 1 (Thread 0x7f329292d740 (LWP 9089)):\n"
      "#0  0x000055f49fa6519e in crash_in_work_frame () at c.cc:9\n#1  0x1 in main () at c.cc:16\n";
  EXPECT_EQ(parse_core_info(text).thread, 9089);
}

}  // namespace
}  // namespace faultline::harness
