// Stacks read by the harness's own libdwfl reader (dwfl_stacks.h), from real programs and real
// cores, with no debugger involved. A core of fl_testdata_nodebug_crash (no DWARF, its static
// function named only by .symtab, the crash on a worker thread while main sleeps) must name
// nodebug_worker_touch in the crashing thread, which the core's notes identify, and list main's
// thread too; a core of fl_testdata_crash_in_work (one thread) must name crash_in_work_frame;
// capture_core must write such a core as a section classify reads back and delete it; a stopped
// fl_testdata_agent_hang must show its three threads in their known functions and stay stopped,
// read directly and as capture_stacks_outside's libdwfl section; files that are not cores and
// processes that do not exist are refused with errors saying so. Cores are dumped by the kernel
// into a fresh directory per test (RLIMIT_CORE raised here, which the child inherits); the core
// tests skip where core_pattern pipes cores to a program.
#include "harness/run/dwfl_stacks.h"

#include <fcntl.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "harness/detail/proc.h"
#include "harness/detail/sys.h"
#include "harness/run/classify.h"
#include "harness/run/core_dump.h"
#include "harness/run/process.h"
#include "harness/run/stacks.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

fs::path testdata(const std::string& name) { return detail::self_dir() / name; }

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A fresh directory, removed with everything in it.
class temp_dir {
 public:
  explicit temp_dir(const std::string& tag)
      : path_(fs::temp_directory_path() / ("fl_dwfl_" + tag + "." + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Why cores cannot be had in `dir` here ("" when they can).
std::string no_cores_in(const fs::path& dir) {
  if (auto why = enable_core_capture(); !why.empty()) return why;  // also raises RLIMIT_CORE
  return core_destination_problem(dir);
}

struct dumped_core {
  pid_t pid = 0;
  fs::path core;
};

// Runs `program` in `dir` until it dies of SIGSEGV with a core, and finds the core.
std::optional<dumped_core> crash_with_core(const fs::path& program, const fs::path& dir) {
  spawn_options o;
  o.argv = {program.string()};
  o.envp = current_environment();
  o.cwd = dir.string();
  auto c = spawn(o);
  EXPECT_TRUE(c) << c.error().message();
  if (!c) return std::nullopt;
  const pid_t pid = c->pid();
  EXPECT_TRUE(c->wait_exit_for(30s)) << program << " did not crash";
  if (!c->wait_exit_for(0ms)) {
    c->signal(SIGKILL);
    c->reap();
    return std::nullopt;
  }
  const int status = c->reap();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) << program << ": wait status " << status;
  EXPECT_TRUE(WIFSIGNALED(status) && WCOREDUMP(status)) << program << " dumped no core";
  auto pattern = detail::read_file("/proc/sys/kernel/core_pattern", 4096);
  auto uses_pid = detail::read_file("/proc/sys/kernel/core_uses_pid", 64);
  const std::string glob_text =
      core_glob(trimmed(pattern ? *pattern : "core"), uses_pid && trimmed(*uses_pid) == "1", dir);
  glob_t found{};
  std::optional<dumped_core> out;
  if (::glob(glob_text.c_str(), 0, nullptr, &found) == 0 && found.gl_pathc > 0)
    out = dumped_core{pid, found.gl_pathv[found.gl_pathc - 1]};
  ::globfree(&found);
  EXPECT_TRUE(out) << "no core matches " << glob_text;
  return out;
}

// A stacks file section as capture_core writes it, for classify to read back.
std::string core_section(const core_stacks& c) {
  return "=== process " + std::to_string(c.identity.pid) + " (core) thread " + std::to_string(c.identity.crashed_tid) +
         " via libdwfl ===\n" + c.text;
}

bool has_function(const std::vector<frame>& frames, const std::string& name) {
  for (const auto& f : frames)
    if (f.function == name) return true;
  return false;
}

TEST(dwfl_core, names_a_symtab_only_function_in_the_crashing_worker_thread_and_lists_every_thread) {
  temp_dir dir("nodebug");
  if (auto why = no_cores_in(dir.path()); !why.empty()) GTEST_SKIP() << "no core dumps here: " << why;
  const fs::path program = testdata("fl_testdata_nodebug_crash");
  ASSERT_TRUE(fs::exists(program)) << program << " is missing: build fl_testdata_nodebug_crash";
  auto dumped = crash_with_core(program, dir.path());
  ASSERT_TRUE(dumped);

  auto identity = read_core_identity(dumped->core);
  ASSERT_TRUE(identity) << identity.error().message();
  EXPECT_EQ(identity->pid, dumped->pid);
  EXPECT_NE(identity->crashed_tid, dumped->pid) << "the worker thread crashed, not main";
  EXPECT_EQ(identity->signal, SIGSEGV);
  EXPECT_EQ(identity->command, program.filename().string().substr(0, 15));

  auto stacks = read_core_stacks(dumped->core);
  ASSERT_TRUE(stacks) << stacks.error().message();
  EXPECT_EQ(stacks->identity.crashed_tid, identity->crashed_tid);
  EXPECT_EQ(stacks->threads, 2u) << stacks->text;
  const std::string text = core_section(*stacks);
  // The crashing thread comes first, as the kernel wrote it.
  EXPECT_EQ(stacks->text.find("TID " + std::to_string(identity->crashed_tid) + ":\n"), stacks->text.find("TID "))
      << text;

  auto threads = parse_stacks(text);
  ASSERT_EQ(threads.size(), 2u) << text;
  EXPECT_TRUE(threads[0].faulted) << text;
  const auto& crashed = threads[0].frames;
  ASSERT_FALSE(crashed.empty()) << text;
  EXPECT_EQ(crashed[0].function, "(anonymous namespace)::nodebug_worker_touch") << text;
  EXPECT_EQ(fs::canonical(crashed[0].module), fs::canonical(program)) << text;
  EXPECT_EQ(frames_signature(crashed), "(anonymous namespace)::nodebug_worker_touch") << text;
  // main's thread is listed too, wherever it was (asleep in main, or still returning from the
  // clone3 that started the worker, where libdwfl, like eu-stack, unwinds no further).
  EXPECT_EQ(threads[1].tid, identity->pid) << text;
  EXPECT_FALSE(threads[1].frames.empty()) << text;
}

TEST(dwfl_core, names_the_crashing_function_of_a_single_thread_and_takes_the_executable_as_a_hint) {
  temp_dir dir("crash_in_work");
  if (auto why = no_cores_in(dir.path()); !why.empty()) GTEST_SKIP() << "no core dumps here: " << why;
  const fs::path program = testdata("fl_testdata_crash_in_work");
  ASSERT_TRUE(fs::exists(program)) << program << " is missing: build fl_testdata_crash_in_work";
  auto dumped = crash_with_core(program, dir.path());
  ASSERT_TRUE(dumped);

  for (const fs::path& hint : {fs::path(), program}) {
    auto stacks = read_core_stacks(dumped->core, hint);
    ASSERT_TRUE(stacks) << stacks.error().message();
    EXPECT_EQ(stacks->identity.pid, dumped->pid);
    EXPECT_EQ(stacks->identity.crashed_tid, dumped->pid);
    EXPECT_EQ(stacks->threads, 1u);
    const auto frames = thread_frames(core_section(*stacks), dumped->pid, dumped->pid);
    ASSERT_GE(frames.size(), 2u) << stacks->text;
    EXPECT_EQ(frames[0].function, "crash_in_work_frame") << stacks->text;
    EXPECT_EQ(frames[1].function, "main") << stacks->text;
    EXPECT_EQ(frames_signature(frames), "crash_in_work_frame | main") << stacks->text;
  }
}

TEST(dwfl_core, bounds_the_frames_of_a_thread) {
  temp_dir dir("bounded");
  if (auto why = no_cores_in(dir.path()); !why.empty()) GTEST_SKIP() << "no core dumps here: " << why;
  auto dumped = crash_with_core(testdata("fl_testdata_crash_in_work"), dir.path());
  ASSERT_TRUE(dumped);
  dwfl_limits limits;
  limits.max_frames = 1;
  auto stacks = read_core_stacks(dumped->core, {}, limits);
  ASSERT_TRUE(stacks) << stacks.error().message();
  EXPECT_EQ(stacks->frames, 1u) << stacks->text;
  EXPECT_NE(stacks->text.find("(stopped after 1 frames)"), std::string::npos) << stacks->text;
}

TEST(dwfl_core, capture_core_writes_the_crashing_thread_section_and_deletes_only_its_own_core) {
  temp_dir dir("capture");
  if (auto why = no_cores_in(dir.path()); !why.empty()) GTEST_SKIP() << "no core dumps here: " << why;
  const auto since = std::chrono::system_clock::now();
  auto dumped = crash_with_core(testdata("fl_testdata_nodebug_crash"), dir.path());
  ASSERT_TRUE(dumped);
  const fs::path out = dir.path() / "crash-stacks.txt";

  // Another run's core (another pid) is left where it is.
  auto other = capture_core({dumped->pid + 100000}, dir.path(), since, out);
  EXPECT_EQ(other.code(), core::errc::not_found) << other.message();
  ASSERT_TRUE(fs::exists(dumped->core));

  auto s = capture_core({dumped->pid}, dir.path(), since, out);
  ASSERT_TRUE(s) << s.message();
  EXPECT_FALSE(fs::exists(dumped->core)) << "the core was not deleted";
  auto text = detail::read_file(out);
  ASSERT_TRUE(text);
  EXPECT_NE(text->find("=== process " + std::to_string(dumped->pid) + " (core) thread "), std::string::npos) << *text;
  EXPECT_NE(text->find(" via libdwfl ===\n"), std::string::npos) << *text;
  auto threads = parse_stacks(*text);
  ASSERT_EQ(threads.size(), 2u) << *text;
  EXPECT_TRUE(threads[0].faulted);
  EXPECT_EQ(frames_signature(threads[0].frames), "(anonymous namespace)::nodebug_worker_touch") << *text;
}

TEST(dwfl_core, refuses_what_is_not_a_core_with_a_message_that_says_so) {
  temp_dir dir("not_core");
  const fs::path text_file = dir.path() / "core";
  std::ofstream(text_file) << "not an ELF file at all\n";
  for (auto r : {read_core_identity(text_file).error(), read_core_stacks(text_file).error()}) {
    EXPECT_EQ(r.code(), core::errc::invalid_argument) << r.message();
    EXPECT_NE(r.message().find("is not an ELF file"), std::string::npos) << r.message();
  }
  const fs::path executable = testdata("fl_testdata_crash_in_work");
  for (auto r : {read_core_identity(executable).error(), read_core_stacks(executable).error()}) {
    EXPECT_EQ(r.code(), core::errc::invalid_argument) << r.message();
    EXPECT_NE(r.message().find("is not a core file (ELF type DYN)"), std::string::npos) << r.message();
  }
  const auto missing = read_core_stacks(dir.path() / "nothing-here");
  EXPECT_EQ(missing.code(), core::errc::not_found) << missing.error().message();
}

// fl_testdata_agent_hang, stopped by SIGSTOP once its threads block: main in
// agent_hang_main_frame, "fl-hang-a" and "fl-hang-b" in agent_hang_thread_frame.
class dwfl_stopped_process : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path program = testdata("fl_testdata_agent_hang");
    ASSERT_TRUE(fs::exists(program)) << program << " is missing: build fl_testdata_agent_hang";
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    spawn_options o;
    o.argv = {program.string()};
    o.envp = current_environment();
    o.stdout_fd = fds[1];
    auto c = spawn(o);
    ::close(fds[1]);
    ASSERT_TRUE(c) << c.error().message();
    child_ = std::move(*c);
    // "ready" comes from inside agent_hang_main_frame, once both threads have started.
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (got.find("ready\n") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    ASSERT_NE(got.find("ready\n"), std::string::npos) << "the program never got ready: " << got;
    // Both workers are past "started" and about to block; give them a moment to get there.
    std::this_thread::sleep_for(200ms);
    ASSERT_TRUE(child_.signal(SIGSTOP));
    ASSERT_TRUE(wait_state([](char s) { return s == 'T'; }));
  }
  void TearDown() override {
    if (child_.pid() > 0) {
      child_.signal(SIGKILL);
      child_.reap();
    }
  }
  template <class Pred>
  bool wait_state(Pred pred) {
    for (int i = 0; i < 250; ++i) {
      auto st = detail::read_stat(child_.pid());
      if (st && pred(st->state)) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  child child_;
};

TEST_F(dwfl_stopped_process, shows_every_thread_in_its_function_and_leaves_it_stopped) {
  const pid_t pid = child_.pid();
  auto text = read_process_stacks(pid);
  ASSERT_TRUE(text) << text.error().message();
  EXPECT_EQ(text->rfind("PID " + std::to_string(pid) + " - process\n", 0), 0u) << *text;
  const std::string section = "=== process " + std::to_string(pid) + " (fl_testdata_age) via libdwfl ===\n" + *text;
  auto threads = parse_stacks(section);
  ASSERT_EQ(threads.size(), 3u) << *text;
  int in_thread_frame = 0;
  for (const auto& t : threads) {
    ASSERT_FALSE(t.frames.empty()) << *text;
    if (t.tid == pid) {
      EXPECT_TRUE(has_function(t.frames, "agent_hang_main_frame")) << *text;
      EXPECT_TRUE(has_function(t.frames, "main")) << *text;
    } else {
      in_thread_frame += has_function(t.frames, "agent_hang_thread_frame");
    }
  }
  EXPECT_EQ(in_thread_frame, 2) << *text;
  EXPECT_EQ(hang_signature(section).find("agent_hang_"), 0u) << hang_signature(section);

  // Still stopped once libdwfl has detached; SIGCONT (the caller's) resumes it.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(detail::read_stat(pid)->state, 'T');
  ASSERT_TRUE(child_.signal(SIGCONT));
  EXPECT_TRUE(wait_state([](char s) { return s != 'T'; }));
}

// The way stacks.h takes when neither gdb nor eu-stack is installed.
TEST_F(dwfl_stopped_process, is_captured_outside_by_libdwfl_with_its_faulted_thread_marked) {
  const pid_t pid = child_.pid();
  auto st = detail::read_stat(pid);
  ASSERT_TRUE(st);
  temp_dir dir("outside");
  const fs::path out = dir.path() / "crash-stacks.txt";
  stack_options o;
  o.method = stack_method::libdwfl;
  auto s = capture_stacks_outside({*st}, out, o, faulted_thread{pid, pid});
  ASSERT_TRUE(s) << s.message();
  auto text = detail::read_file(out);
  ASSERT_TRUE(text);
  EXPECT_NE(text->find("state T thread " + std::to_string(pid) + " via libdwfl ===\nPID "), std::string::npos) << *text;
  auto threads = parse_stacks(*text);
  ASSERT_EQ(threads.size(), 3u) << *text;
  EXPECT_TRUE(threads[0].faulted);
  EXPECT_EQ(frames_signature(threads[0].frames), "agent_hang_main_frame | main") << *text;
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(detail::read_stat(pid)->state, 'T');
  EXPECT_TRUE(outside_capture_available());
}

TEST(dwfl_process, a_process_that_does_not_exist_is_not_found) {
  // A pid past pid_max is never in use.
  auto r = read_process_stacks(1 << 23);
  EXPECT_EQ(r.code(), core::errc::not_found) << r.error().message();
}

}  // namespace
}  // namespace faultline::harness
