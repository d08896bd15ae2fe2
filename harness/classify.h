// Turning what the runner saw into an outcome, a phase and a signature (DESIGN §5).
//
// The runner records the evidence (how the leader ended, whether it timed out, what was left
// behind); the files in the run directory say the rest: crash.PID from the agent's crash
// handler (signal and frames), phase.PID markers (was the work over?), the gtest XML and the
// gtest premature-exit file (had the tests finished?), the stack dump of a hang, and the log
// (a scenario's "invariant violated: NAME: detail").
//
// Outcome precedence: error (not started) > hang (timed out) > crash (signal, or any crash.PID)
// > fail (non-zero exit) > leak (processes or shared memory left behind) > pass.
// Phase: `exit` when the failing process had marked work-end, main-returned or exit, or the
// gtest run was complete (premature-exit file removed by the program, or XML all passed);
// otherwise `run`. Signatures: "SIGSEGV: f | g | main" from the top three meaningful frames
// (agent, libc, abort/raise, start-up and std:: internals skipped; "??" frames symbolised with
// addr2line), "hang: f | g" from the hung main thread, the invariant name or "exit N" for a
// failure, "leak: comm,comm" for a leak.
//
//   harness::classification c = harness::classify(evidence);
//
// Thread safety: pure functions over files; classify runs addr2line.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/results.h"

namespace faultline::harness {

/// Name of the gtest premature-exit file the runner creates in each run directory.
inline constexpr const char* premature_exit_file = "test_premature_exit";
/// Name of the gtest XML the runner asks gtest programs to write in each run directory.
inline constexpr const char* gtest_xml_file = "gtest.xml";
/// Name of the stack dump in each run directory.
inline constexpr const char* stacks_file = "stacks.txt";

/// One stack frame from a crash file, an agent stack dump or gdb.
struct frame {
  std::string function;     ///< demangled name without parameters; "" or "??" when unknown
  std::string module;       ///< object file path, when known
  std::uint64_t offset = 0; ///< offset in module (valid when has_offset)
  bool has_offset = false;
};

/// A parsed crash.PID file.
struct crash_report {
  int signal = 0;
  pid_t thread = 0;
  std::vector<frame> frames;
};

/// Parses crash.PID text (protocol.h format). nullopt when the first line is not "signal N ...".
std::optional<crash_report> parse_crash(std::string_view text);

/// Strips a trailing parameter list (and " const") from a demangled name: "ns::f(int) const" ->
/// "ns::f"; "S::operator()(int)" -> "S::operator()".
std::string strip_parameters(std::string_view name);

/// Frames of thread `tid` in the section for process `pid` of a stacks.txt (gdb or agent
/// format); empty when not found.
std::vector<frame> thread_frames(std::string_view stacks_text, pid_t pid, pid_t tid);

/// False for frames that say nothing about the program: the agent, libc/libstdc++/libgcc and
/// the loader, signal trampolines, abort/raise/assert, start-up (_start, __libc_start_main,
/// start_thread, clone), names beginning "__", and std::/__gnu_cxx::/__cxxabiv1:: internals.
bool meaningful(const frame& f);

/// Replaces "??" function names by addr2line's answer where the module can be read.
/// `exact_top` frames are taken at their address; later frames are return addresses and are
/// looked up one byte earlier (a call may be a function's last instruction).
void symbolise(std::vector<frame>& frames);

/// "f | g | h": the first `depth` meaningful frames ("module+0xoff" for unnamed ones).
std::string frames_signature(const std::vector<frame>& frames, std::size_t depth = 3);

/// The NAME of the first "invariant violated: NAME: detail" line in `log`.
std::optional<std::string> find_invariant(std::string_view log);

/// What the runner saw of one run.
struct run_evidence {
  std::filesystem::path run_dir;
  std::filesystem::path log_path;
  std::filesystem::path stacks_path;  ///< empty when no stacks were taken
  /// Every thread of the run's tree, captured out of process while a crashing process was
  /// stopped in the agent's handler (agent::crash_stacks_file); empty when none was taken.
  std::filesystem::path crash_stacks_path;
  bool spawn_failed = false;
  std::string spawn_error;
  bool timed_out = false;
  pid_t leader = 0;
  std::optional<int> wait_status;     ///< the leader's waitpid status
  std::vector<int> leaked_pids;
  std::vector<std::string> leaked_comms;
  std::vector<std::string> leaked_shm;
  bool premature_exit_armed = false;  ///< the runner created the premature-exit file
};

/// The verdict on one run.
struct classification {
  outcome result = outcome::pass;
  phase when = phase::none;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string signature;
};

/// Classifies one run from the evidence and the run directory's files.
classification classify(const run_evidence& e);

}  // namespace faultline::harness
