// Turning what the runner saw into an outcome, a phase and a signature (DESIGN.md §9).
//
// The runner records the evidence (how the leader ended, whether it timed out, what was left
// behind); the files in the run directory say the rest: crash.PID from the agent's crash
// handler (signal and frames), crash-stacks.txt (every thread, captured out of process or from
// a core), phase.PID markers (was the work over?), the gtest XML and the gtest premature-exit
// file (had the tests finished?), the stack dump of a hang, and the log (a scenario's
// "invariant violated: NAME: detail").
//
// Outcome precedence: error (not started) > hang (timed out) > crash (signal, or any crash.PID)
// > fail (non-zero exit) > leak (processes or shared memory left behind) > pass.
// Phase: `exit` when the failing process had marked work-end, main-returned or exit, or the
// gtest run was complete (premature-exit file removed by the program, or XML all passed);
// otherwise `run`.
//
// Signatures are made of the program's own frames, as ClusterFuzz makes them: runtime and
// system frames are skipped by module (libc, libstdc++, ld.so, libcuda, libcudart, the agent,
// ...) and by name (abort/raise, start-up, std:: internals), and unnamed frames are first
// symbolised from the module's DWARF or symbol table (addr2line).
//   crash  "SIGSEGV: f | g | main": the top three program frames of the crashing thread, taken
//          from crash-stacks.txt when it holds that thread, else from crash.PID; a crash with
//          no program frame at all is named by its first frame's module ("SIGSEGV:
//          libcuda.so.1+0x1234"), one without frames by its signal alone.
//   hang   "hang: wait_for_child | worker_loop": where the threads are blocked, from every
//          thread of every process in stacks.txt (each thread's topmost program frame, sorted,
//          deduplicated).
//   fail   the invariant's name, or "exit N".
//   leak   "leak: comm,comm".
//
//   harness::classification c = harness::classify(evidence);
//
// Thread safety: pure functions over files; classify and symbolise run addr2line.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/results/results.h"

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
  /// No function symbol of its module covers the address, though the module names functions:
  /// code whose symbols were stripped (a runtime linked statically into a library). Never the
  /// program's own frame; left unnamed rather than named after whatever symbol precedes it.
  bool outside_functions = false;
  /// The frame's address in its process, as a stack dump printed it (0 when not printed): how a
  /// gdb frame without a module is placed in one (gdb names none for code with debug info).
  std::uint64_t address = 0;
};

/// A parsed crash.PID file.
struct crash_report {
  int signal = 0;
  pid_t thread = 0;
  std::vector<frame> frames;
};

/// Parses crash.PID text (protocol.h format). nullopt when the first line is not "signal N ...".
std::optional<crash_report> parse_crash(std::string_view text);

/// Strips a trailing parameter list (and " const", and GCC's clone suffixes) from a demangled
/// name: "ns::f(int) const" -> "ns::f"; "S::operator()(int)" -> "S::operator()";
/// "f(int) [clone .isra.0]" -> "f"; "S::operator()" stays.
std::string strip_parameters(std::string_view name);

/// One thread of a stacks.txt.
struct thread_stack {
  pid_t pid = 0;
  pid_t tid = 0;
  /// The section names this thread as the one that took the fatal signal (a section read from
  /// a core: "=== process PID (core) thread TID via gdb ===").
  bool faulted = false;
  /// The frames are the Python interpreter's own (a "via py-spy" section: function and source
  /// file, innermost first), not the machine's.
  bool python = false;
  std::vector<frame> frames;
};

/// Every thread of a stacks.txt, in order. Sections open with "=== process PID (COMM) ... via
/// METHOD ===" (stacks.h) and hold, by METHOD: gdb's `thread apply all bt` ("Thread N (Thread
/// 0x.. (LWP TID) "name"):" then "#K  0x.. in f (args) at file:line" / "... from MODULE"),
/// followed by its `info proc mappings`, which places the frames gdb gave no module in theirs,
/// eu-stack's output ("PID N - process", "TID N:", "#K  0x.. f - MODULE"; a bare eu-stack
/// output with no "===" header is read too), the agent's stacks.PID (protocol.h), /proc's
/// (threads without frames) or py-spy's Python frames of an interpreter ("Thread TID (idle):
/// "name"" then "    function (file.py:line)"; those threads have `python` set). A thread listed
/// twice (two agent dumps, or its C and its Python frames) appears twice.
std::vector<thread_stack> parse_stacks(std::string_view stacks_text);

/// Frames of thread `tid` of process `pid` in a stacks.txt (any format parse_stacks reads);
/// empty when not found.
std::vector<frame> thread_frames(std::string_view stacks_text, pid_t pid, pid_t tid);

/// True for the libraries faultline itself puts into a run's processes: the preloaded agent
/// (libfaultline_agent.so), the lock/ points (libfaultline_lock_points.so) and libfiu's
/// (fiu_posix_preload.so, fiu_run_preload.so, libfiu.so) that posix/ points preload. Judged by
/// the file name of `module`, a path or a bare name.
bool faultline_module(std::string_view module);

/// False for frames that say nothing about the program. By module: libc, libm, libpthread,
/// libdl, librt, libstdc++, libgcc_s, the loader (ld-linux, ld.so), the vDSO, libcuda,
/// libcudart, libnvidia-*, the sanitizer runtimes and faultline's own (faultline_module: every
/// frame of them, whatever its name). By name, whatever the module: signal trampolines, abort/raise/exit,
/// start-up (_start, start_thread, clone), names beginning "__", std::/__gnu_cxx::/__cxxabiv1::/
/// cudart:: internals and the agent's own (faultline::agent::). A frame with no module (gdb
/// names libc's functions without one when libc has debug info) is also judged by name against
/// the C library's blocking and start-up calls (read, poll, nanosleep, pthread_*, ...). An
/// unnamed frame counts only with a module and an offset.
bool meaningful(const frame& f);

/// Replaces "??" function names by addr2line's answer where the module can be read: from its
/// DWARF, or without debug info from its .symtab/.dynsym (binutils' addr2line does both, so a
/// static function of a program built without -g and without -rdynamic is named). Frame 0 and
/// a frame right after a signal trampoline are taken at their address; the others hold return
/// addresses and are looked up one byte earlier (a call may be a function's last instruction).
/// Frames addr2line cannot name (or no addr2line) stay "??".
void symbolise(std::vector<frame>& frames);

/// "f | g | h": the first `depth` meaningful frames after the first signal trampoline (frames
/// before it are the handler's), unnamed ones as "module+0xoff". When no frame is meaningful,
/// the first frame that has a module other than faultline's: "libcuda.so.1+0x1234" (its
/// module's file name, and its offset when known), so a crash entirely inside a runtime still
/// has a stable signature.
/// "" when no frame has a module either.
std::string frames_signature(const std::vector<frame>& frames, std::size_t depth = 3);

/// Where the threads of a hung tree are blocked: for every thread of `stacks_text` (all its
/// processes), its topmost meaningful frame (the program's function that made the blocking
/// call); threads without one are dropped, the names deduplicated, sorted and the first
/// `depth` joined: "wait_for_child | worker_loop". Stable across runs (no addresses, no ids).
/// Unnamed frames are symbolised first. "" when no thread has a meaningful frame.
std::string hang_signature(std::string_view stacks_text, std::size_t depth = 3);

/// The NAME of the first "invariant violated: NAME: detail" line in `log`.
std::optional<std::string> find_invariant(std::string_view log);

/// The phase a process of `run_dir` was in, from its agent markers (protocol.h; the table and
/// phase.PID files, phases.h): `exit` once it marked work-end, main-returned or exit, else `run`
/// (also when it left no markers). classify() judges crashes and hangs by it.
phase marked_phase(const std::filesystem::path& run_dir, pid_t pid);

/// One late CUDA call the agent recorded in late-cuda.PID (protocol.h): the API, and the calling
/// thread's frames (none for the calls past agent::late_cuda_framed_calls).
struct late_call {
  pid_t pid = 0;
  std::string api;
  std::vector<frame> frames;
};

/// Every late CUDA call recorded in `run_dir` (each late-cuda.PID file in file order), those of
/// process `leader` first (0: none is).
std::vector<late_call> late_cuda_calls(const std::filesystem::path& run_dir, pid_t leader);

/// The signature classify() gives a run failed by `call`: "late-cuda: API", followed by
/// " ← f | g" when the call has program frames (its top two, symbolised here first).
std::string late_cuda_signature(late_call& call);

/// The late calls of `run_dir` by API: one entry per API (in name order) with the number of
/// calls, the processes that made them, and the signature of its first call with frames (else
/// its first): what a run's record and `agent-report` list.
struct late_cuda_api {
  std::string api;
  std::uint64_t calls = 0;
  std::vector<pid_t> pids;  ///< ascending
  std::string signature;
};
std::vector<late_cuda_api> late_cuda_by_api(const std::filesystem::path& run_dir);

/// The fault-spec patterns processes of `run_dir` reached: the union of its points.PID files
/// (protocol.h), each line once, sorted.
std::vector<std::string> read_points(const std::filesystem::path& run_dir);

/// What the runner saw of one run.
struct run_evidence {
  std::filesystem::path run_dir;
  std::filesystem::path log_path;
  std::filesystem::path stacks_path;  ///< empty when no stacks were taken
  /// Every thread of the run's tree, captured out of process while a crashing process was
  /// stopped in the agent's handler, or the crashed process's threads read from its core
  /// (agent::crash_stacks_file); empty when none was taken. classify() takes the crashing
  /// thread's frames from it: the thread crash.PID names, else the one a core section names.
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
  /// The stack behind a crash's or a hang's signature, top first, at most top_frames_kept
  /// (top_frame_lines): the crashing thread's frames below its signal handler; for a hang, every
  /// frame of the first thread (in stacks.txt order) blocked in the program's code, else of the
  /// leader's main thread. Empty when no stack was read, and for other outcomes.
  std::vector<std::string> top_frames;
  /// A distributed run's ranks, judged (nccl_ranks.h): set by the runner when some process left
  /// an nccl.PID; a hang's signature is then theirs (results/ranks.h: ranks_hang_signature).
  std::vector<nccl_rank_record> ranks;
};

/// How many frames classification::top_frames keeps.
inline constexpr std::size_t top_frames_kept = 8;

/// One line per frame, top first, at most `max` of them: "f  (module)" (its module's file name),
/// "module+0xoff" for an unnamed frame, "f" when the module is unknown; with `below_handler`,
/// frames before the first signal trampoline (a crash handler's) are left out (a hang keeps
/// them: a thread may block in a handler, an fn/ point's delay among them). Every other frame
/// is listed, runtime and faultline's included: this is the stack, not the signature.
std::vector<std::string> top_frame_lines(const std::vector<frame>& frames, std::size_t max = top_frames_kept,
                                         bool below_handler = true);

/// Classifies one run from the evidence and the run directory's files.
classification classify(const run_evidence& e);

}  // namespace faultline::harness
