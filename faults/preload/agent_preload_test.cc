// Tests of the agent as a preloaded library (exit phases, crash capture modes, the exit points)
// and of the phase table its processes share, watched from outside as the runner sees it (see
// agent_test.cc; what both use: testing/agent_test_support.h).
#include "faults/preload/agent.h"

#include "faults/preload/testing/agent_test_support.h"

namespace faultline::agent {
namespace {

using namespace test_support;

// --- preload ------------------------------------------------------------------------------

TEST(agent_preload, marks_main_returned_then_exit_and_keeps_the_exit_code) {
  run_directory dir;
  child_process child({plain_program, "return", "7"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 7)) << child.err();
  EXPECT_EQ(child.out(), "ok\n");
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nmain-returned\nexit\n");
}

TEST(agent_preload, marks_exit_called_before_main_returns) {
  run_directory dir;
  child_process child({plain_program, "exit", "5"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 5)) << child.err();
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nexit\n");
}

TEST(agent_preload, reports_a_crash_during_work) {
  run_directory dir;
  child_process child({plain_program, "segv"}, preload_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\n");
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_plain::plain_segv_frame()");
  EXPECT_EQ(report.frames[0].module, real_path(plain_program));
}

TEST(agent_preload, puts_a_crash_in_a_static_destructor_in_the_exit_phase) {
  run_directory dir;
  child_process child({plain_program, "exit-segv"}, preload_env(dir));
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  EXPECT_EQ(child.out(), "done\n");
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nmain-returned\nexit\n");
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_FALSE(report.frames.empty());
  EXPECT_EQ(report.frames[0].function, "agent_test_plain::plain_exit_segv_frame()");
  bool through_exit = false;  // libc's exit(), reached from the preload's exit()
  for (const frame_line& frame : report.frames) through_exit |= frame.function == "exit";
  EXPECT_TRUE(through_exit);
}

// The crash capture modes of protocol.h: what reaches crash.PID, and the stop handshake.
TEST(agent_preload, minimal_crash_mode_writes_the_header_and_the_faulting_frame_only) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back(std::string(crash_mode_env) + "=minimal");
  child_process child({plain_program, "segv"}, env);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  EXPECT_EQ(report.signal_line, "signal 11 SIGSEGV");
  ASSERT_EQ(report.frames.size(), 1u);
  // Not demangled in the handler (that takes time): the runner demangles it.
  EXPECT_EQ(report.frames[0].function, "_ZN16agent_test_plain16plain_segv_frameEv");
}

char process_state(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

TEST(agent_preload, stop_crash_mode_tells_the_runner_and_waits_for_sigcont) {
  run_directory dir;
  int channel[2];
  ASSERT_EQ(::pipe(channel), 0);  // the write end is inherited, as the runner's is
  ::fcntl(channel[0], F_SETFD, FD_CLOEXEC);
  std::vector<std::string> env = preload_env(dir);
  env.push_back(std::string(crash_mode_env) + "=stop");
  env.push_back(std::string(crash_fd_env) + "=" + std::to_string(channel[1]));
  child_process child({plain_program, "segv"}, env);
  ::close(channel[1]);
  pollfd p{channel[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1) << "no crash record from the agent";
  char line[128] = {};
  ASSERT_GT(::read(channel[0], line, sizeof(line) - 1), 0);
  ::close(channel[0]);
  EXPECT_EQ(std::string(line), "crash " + std::to_string(child.pid()) + " " +
                                   std::to_string(child.pid()) + " " + std::to_string(SIGSEGV) + "\n");
  // The whole process stops and stays stopped until it is continued.
  char state = '?';
  for (int i = 0; i < 200 && (state = process_state(child.pid())) != 'T'; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(state, 'T');
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(process_state(child.pid()), 'T');
  EXPECT_EQ(dir.read(crash_file_prefix, child.pid()), "");  // nothing written before SIGCONT
  ::kill(child.pid(), SIGCONT);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  crash_report report = parse_crash(dir.read(crash_file_prefix, child.pid()));
  ASSERT_EQ(report.frames.size(), 1u);
  // Not demangled in the handler (that takes time): the runner demangles it.
  EXPECT_EQ(report.frames[0].function, "_ZN16agent_test_plain16plain_segv_frameEv");
}

TEST(agent_preload, stop_crash_mode_without_a_pipe_does_not_stop) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back(std::string(crash_mode_env) + "=stop");
  env.push_back(std::string(crash_fd_env) + "=not-a-number");
  child_process child({plain_program, "segv"}, env);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  EXPECT_EQ(parse_crash(dir.read(crash_file_prefix, child.pid())).frames.size(), 1u);
}

// Mode off: no crash handler at all (a handler changes how exit races end), the dump signal's
// handler still there (hangs are still dumped).
TEST(agent_preload, off_crash_mode_installs_no_crash_handler) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back(std::string(crash_mode_env) + "=off");
  child_process child({plain_program, "hang", "0"}, env);
  ASSERT_TRUE(child.wait_for_line("ready"));
  std::string status = read_file("/proc/" + std::to_string(child.pid()) + "/status");
  auto at = status.find("SigCgt:");
  ASSERT_NE(at, std::string::npos);
  const std::uint64_t caught = std::stoull(status.substr(at + 7, status.find('\n', at) - at - 7), nullptr, 16);
  auto bit = [](int sig) { return std::uint64_t{1} << (sig - 1); };
  EXPECT_EQ(caught & bit(SIGSEGV), 0u);
  EXPECT_EQ(caught & bit(SIGABRT), 0u);
  EXPECT_NE(caught & bit(stack_dump_signal()), 0u);
  EXPECT_TRUE(killed_by(child.kill_and_reap(), SIGKILL));
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\n");
}

// exit/start and exit/end, the preload's own fault points.
TEST(agent_preload, exit_points_fire_in_order_and_are_recorded_as_reached) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back("FAULTLINE_FAULTS=sim/*=fail;exit/start=print;exit/*=print");
  child_process child({plain_program, "return", "3"}, env);
  EXPECT_TRUE(exited_with(child.finish(), 3)) << child.err();
  const std::string& err = child.err();
  auto start = err.find("fault point exit/start reached");
  auto end = err.find("fault point exit/end reached");
  ASSERT_NE(start, std::string::npos) << err;
  ASSERT_NE(end, std::string::npos) << err;
  EXPECT_LT(start, end);
  EXPECT_EQ(dir.read(points_file_prefix, child.pid()), "exit/start\nexit/*\n");
}

TEST(agent_preload, exit_end_comes_after_static_destructors) {
  // The program's static destructor crashes: exit/end, which runs after every destructor, is
  // never reached, while exit/start is.
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back("FAULTLINE_FAULTS=exit/start=print;exit/end=print");
  child_process child({plain_program, "exit-segv"}, env);
  EXPECT_TRUE(killed_by(child.finish(), SIGSEGV)) << child.err();
  EXPECT_EQ(dir.read(points_file_prefix, child.pid()), "exit/start\n");
}

TEST(agent_preload, exit_kill_and_delay_act) {
  run_directory dir;
  std::vector<std::string> env = preload_env(dir);
  env.push_back("FAULTLINE_FAULTS=exit/end=kill");
  child_process killed({plain_program, "return", "0"}, env);
  EXPECT_TRUE(killed_by(killed.finish(), SIGKILL)) << killed.err();

  env.back() = "FAULTLINE_FAULTS=exit/start=delay(300ms)";
  auto begin = std::chrono::steady_clock::now();
  child_process delayed({plain_program, "return", "0"}, env);
  EXPECT_TRUE(exited_with(delayed.finish(), 0)) << delayed.err();
  EXPECT_GE(std::chrono::steady_clock::now() - begin, 300ms);
}

TEST(agent_preload, is_harmless_without_a_run_dir) {
  std::vector<std::string> env = child_env({"LD_PRELOAD=" + preload_library});
  child_process returns({plain_program, "return", "3"}, env);
  EXPECT_TRUE(exited_with(returns.finish(), 3)) << returns.err();
  EXPECT_EQ(returns.out(), "ok\n");
  EXPECT_EQ(returns.err(), "");
  child_process crashes({plain_program, "segv"}, env);
  EXPECT_TRUE(killed_by(crashes.finish(), SIGSEGV));
  EXPECT_EQ(crashes.err().find("faultline-agent"), std::string::npos);
}

TEST(agent_preload, spawned_children_write_their_own_files) {
  run_directory dir;
  child_process parent({plain_program, "spawn"}, preload_env(dir));
  EXPECT_TRUE(exited_with(parent.finish(), 0)) << parent.err();
  // The spawned program shares stdout and prints its "ok" first.
  std::size_t report = std::min(parent.out().find("child "), parent.out().size());
  std::istringstream out(parent.out().substr(report));
  std::string word;
  pid_t spawned = 0;
  int status = -1;
  out >> word >> spawned >> status;
  ASSERT_EQ(word, "child") << parent.out();
  EXPECT_TRUE(exited_with(status, 0));
  EXPECT_EQ(dir.read(phase_file_prefix, spawned), "run\nmain-returned\nexit\n");
  EXPECT_EQ(dir.read(phase_file_prefix, parent.pid()), "run\nmain-returned\nexit\n");
}

// --- phase table -----------------------------------------------------------------------------

// Makes DIR/phases as the runner does (zeroed, with its header), `taken` slots already handed out.
void make_phase_table(const run_directory& dir, std::uint32_t taken = 0) {
  std::string bytes(phase_table_bytes, '\0');
  phase_table_header header{phase_table_magic, phase_slot_bytes, phase_table_slots, taken};
  std::memcpy(bytes.data(), &header, sizeof header);
  std::ofstream(dir.path() + "/" + phase_table_file, std::ios::binary) << bytes;
}

// The published slots of DIR/phases: pid -> markers, and how many slots were handed out.
std::map<pid_t, std::string> read_phase_table(const run_directory& dir, std::uint32_t* handed = nullptr) {
  std::string bytes = read_file(dir.path() + "/" + phase_table_file);
  EXPECT_EQ(bytes.size(), phase_table_bytes) << "the agent never resizes the table";
  std::map<pid_t, std::string> slots;
  if (bytes.size() != phase_table_bytes) return slots;
  phase_table_header header{};
  std::memcpy(&header, bytes.data(), sizeof header);
  if (handed) *handed = header.next;
  for (std::uint32_t k = 0; k < std::min(header.next, phase_table_slots); ++k) {
    phase_slot slot{};
    std::memcpy(&slot, bytes.data() + (k + 1) * phase_slot_bytes, sizeof slot);
    if (slot.pid == 0) continue;  // not handed to any process (the test made it so)
    EXPECT_TRUE(slots.emplace(slot.pid, std::string(slot.markers, std::min<std::size_t>(slot.used, sizeof slot.markers))).second)
        << "pid " << slot.pid << " holds two slots";
  }
  return slots;
}

TEST(agent_phase_table, each_process_of_a_tree_writes_its_markers_in_a_slot_of_its_own) {
  run_directory dir;
  make_phase_table(dir);
  child_process parent({plain_program, "spawn"}, preload_env(dir));
  EXPECT_TRUE(exited_with(parent.finish(), 0)) << parent.err();
  std::istringstream out(parent.out().substr(std::min(parent.out().find("child "), parent.out().size())));
  std::string word;
  pid_t spawned = 0;
  out >> word >> spawned;
  ASSERT_EQ(word, "child") << parent.out();
  std::uint32_t handed = 0;
  auto slots = read_phase_table(dir, &handed);
  EXPECT_EQ(handed, 2u);
  EXPECT_EQ(slots[parent.pid()], "run\nmain-returned\nexit\n");
  EXPECT_EQ(slots[spawned], "run\nmain-returned\nexit\n");
  EXPECT_EQ(dir.names(), std::vector<std::string>{phase_table_file}) << "no phase.PID file beside a table";
}

TEST(agent_phase_table, a_forked_child_takes_its_own_slot) {
  run_directory dir;
  make_phase_table(dir);
  child_process parent({child_program, "fork-segv"}, run_env(dir, {"FAULTLINE_AGENT_QUIET=1"}));
  EXPECT_TRUE(exited_with(parent.finish(), 0)) << parent.err();
  std::istringstream out(parent.out());
  std::string word;
  pid_t forked = 0;
  out >> word >> forked;
  ASSERT_EQ(word, "child") << parent.out();
  auto slots = read_phase_table(dir);
  EXPECT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[forked], "run\n");
  EXPECT_EQ(slots[parent.pid()].rfind("run\n", 0), 0u) << slots[parent.pid()];
}

TEST(agent_phase_table, an_exec_keeps_the_slot_and_its_markers) {
  run_directory dir;
  make_phase_table(dir);
  child_process child({plain_program, "exec", "4"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 4)) << child.err();
  std::uint32_t handed = 0;
  auto slots = read_phase_table(dir, &handed);
  EXPECT_EQ(handed, 1u);
  // The first image marked "run" and never returned from main; the second carried on.
  EXPECT_EQ(slots[child.pid()], "run\nrun\nmain-returned\nexit\n");
}

TEST(agent_phase_table, a_process_that_finds_it_full_writes_its_phase_file) {
  run_directory dir;
  make_phase_table(dir, phase_table_slots);
  child_process child({plain_program, "return", "0"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  std::uint32_t handed = 0;
  EXPECT_TRUE(read_phase_table(dir, &handed).empty());
  EXPECT_EQ(handed, phase_table_slots + 1);
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nmain-returned\nexit\n");
}

TEST(agent_phase_table, a_table_of_another_layout_is_left_alone) {
  run_directory dir;
  std::ofstream(dir.path() + "/" + phase_table_file, std::ios::binary) << std::string(phase_table_bytes, 'x');
  child_process child({plain_program, "return", "0"}, preload_env(dir));
  EXPECT_TRUE(exited_with(child.finish(), 0)) << child.err();
  EXPECT_EQ(read_file(dir.path() + "/" + phase_table_file), std::string(phase_table_bytes, 'x'));
  EXPECT_EQ(dir.read(phase_file_prefix, child.pid()), "run\nmain-returned\nexit\n");
}

TEST(agent_preload, dumps_the_stacks_of_a_program_that_knows_nothing_of_it) {
  run_directory dir;
  child_process child({plain_program, "hang", "2"}, preload_env(dir));
  ASSERT_TRUE(child.wait_for_line("ready")) << child.err();
  ASSERT_EQ(::kill(child.pid(), stack_dump_signal()), 0);
  stack_dump dump = parse_stacks(wait_for_dumps(dir, child.pid(), 1));
  EXPECT_TRUE(dump.well_formed);
  ASSERT_EQ(dump.dumps.size(), 1u);
  EXPECT_EQ(dump.dumps[0].size(), 3u);
  for (const char* name : {"fl-plain-0", "fl-plain-1"}) {
    const thread_block* block = block_named(dump.dumps[0], name);
    ASSERT_NE(block, nullptr) << name;
    EXPECT_GE(find_frame(block->frames, "plain_blocked_frame"), 0);
  }
  EXPECT_TRUE(child.running());
}

// The preload goes into C programs too: it must need nothing beyond libc.
TEST(agent_preload, library_needs_only_libc) {
  int fd = ::open(preload_library.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  std::string image(static_cast<std::size_t>(st.st_size), '\0');
  ASSERT_EQ(::pread(fd, image.data(), image.size(), 0), static_cast<ssize_t>(image.size()));
  ::close(fd);
  ASSERT_GE(image.size(), sizeof(Elf64_Ehdr));
  Elf64_Ehdr header;
  std::memcpy(&header, image.data(), sizeof(header));
  ASSERT_EQ(std::memcmp(header.e_ident, ELFMAG, SELFMAG), 0);
  ASSERT_EQ(header.e_ident[EI_CLASS], ELFCLASS64);
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  ASSERT_LE(header.e_shoff + sections.size() * sizeof(Elf64_Shdr), image.size());
  std::memcpy(sections.data(), image.data() + header.e_shoff, sections.size() * sizeof(Elf64_Shdr));
  std::vector<std::string> needed;
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_type != SHT_DYNAMIC) continue;
    const Elf64_Shdr& strings = sections.at(section.sh_link);
    for (std::size_t at = 0; at + sizeof(Elf64_Dyn) <= section.sh_size; at += sizeof(Elf64_Dyn)) {
      Elf64_Dyn entry;
      std::memcpy(&entry, image.data() + section.sh_offset + at, sizeof(entry));
      if (entry.d_tag == DT_NEEDED) {
        needed.emplace_back(image.data() + strings.sh_offset + entry.d_un.d_val);
      }
    }
  }
  EXPECT_EQ(needed, std::vector<std::string>{"libc.so.6"});
}

}  // namespace
}  // namespace faultline::agent
