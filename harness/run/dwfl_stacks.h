// Stacks without a debugger: elfutils' libdwfl, linked into the harness (statically, so the
// `faultline` binary needs no elfutils library where it is carried), unwinds every thread of a
// core file or of a live process and names each frame from its module's symbol table (.symtab,
// else .dynsym: no debug info needed), demangled, with the module's path; where the module has
// DWARF, the functions inlined at the frame's address come first, as gdb and `eu-stack -i` show
// them. The text is eu-stack's (`eu-stack -m -i`), so classify.h's parse_stacks reads it under a
// "=== process ... via libdwfl ===" header:
//
//   PID 4242 - core
//   TID 4243:
//   #0  0x000055d689cc9150 (anonymous namespace)::nodebug_worker_touch(int) - /opt/prog
//   #1  0x000055d689cc92d7 std::thread::_State_impl<...>::_M_run() - /opt/prog
//   #2  0x00007f7c4c4d44a3 - /usr/lib/x86_64-linux-gnu/libstdc++.so.6
//   TID 4242:
//   ...
//
// A frame's pc is printed as unwound; every frame but an activation (the innermost, or one a
// signal interrupted) holds a return address, which is looked up at pc-1, inside the call, so a
// call that ends its function names that function and not the next one (eu-stack does the same).
//
//   auto core = harness::read_core_stacks("run/core");     // who crashed, and every thread
//   if (core) write(core->identity.pid, core->identity.crashed_tid, core->text);
//   auto live = harness::read_process_stacks(pid, {});      // a stopped process stays stopped
//
// Separate debug files are looked up on this machine only (/usr/lib/debug/.build-id), never
// through debuginfod. A live process is read through ptrace from a thread of the harness: the
// process must be one the harness may trace (its descendants are), and not be traced already.
//
// Thread safety: every function may be called from any thread at once. Core reads are serialised
// (libdwfl 0.188's core reader keeps state in a static); live reads run in parallel, each on a
// thread of its own that holds the ptrace attachment.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>

#include "core/status.h"

namespace faultline::harness {

/// Bounds on one reading.
struct dwfl_limits {
  std::size_t max_threads = 1024;  ///< threads shown; a line says how many more there were
  std::size_t max_frames = 256;    ///< frames per thread, inlined ones included
  /// A live read only: how long to wait for it. Attaching waits for every thread to stop, and a
  /// thread in uninterruptible sleep (a driver call) stops only once it wakes; past this the
  /// read is abandoned (its thread finishes or detaches when the process dies).
  std::chrono::milliseconds timeout{10'000};
};

/// What a core's notes say about the process it is of.
struct core_identity {
  pid_t pid = 0;            ///< NT_PRPSINFO's pr_pid (the pid as the crashing process saw it)
  pid_t group = 0;          ///< NT_PRPSINFO's pr_pgrp: the process group (a run's is its leader's pid)
  pid_t crashed_tid = 0;    ///< the first NT_PRSTATUS: the kernel writes the dumping thread first
  int signal = 0;           ///< that thread's pr_cursig: the signal that dumped the core
  std::string command;      ///< NT_PRPSINFO's pr_fname (the comm, at most 15 characters)
  std::string arguments;    ///< NT_PRPSINFO's pr_psargs (the command line, at most 80 characters)
};

/// Reads the notes of the ELF core file `core` (libelf only; cheap). Errors: not_found when the
/// file does not exist; io_error when it cannot be opened; invalid_argument when it is not an
/// ELF core of this machine's architecture ("... is not a core file (ELF type EXEC)") or has no
/// NT_PRSTATUS note.
core::result<core_identity> read_core_identity(const std::filesystem::path& core);

/// Every thread's stack in a core.
struct core_stacks {
  core_identity identity;
  std::size_t threads = 0;   ///< threads shown in `text`
  std::size_t frames = 0;    ///< frames shown in `text`, every thread together
  std::string text;          ///< "PID N - core", then per thread "TID N:" and its frames
};

/// Reads every thread of the core file `core`, the crashing thread first. The modules are the
/// files its NT_FILE note names, when they are still there with the same build ID; `executable`
/// (optional) is the program, for a core whose notes do not name it. A thread that cannot be
/// unwound (fully) gets a line saying why after the frames it has. Errors: those of
/// read_core_identity; unavailable when libdwfl cannot read the core.
core::result<core_stacks> read_core_stacks(const std::filesystem::path& core,
                                           const std::filesystem::path& executable = {},
                                           const dwfl_limits& limits = {});

/// Reads every thread of the live process `pid` ("PID N - process", then per thread "TID N:"
/// and its frames), attaching to each thread with ptrace in turn. A process in group-stop
/// (SIGSTOP) stays stopped; a running one is stopped only while its threads are read. Errors:
/// not_found when there is no such process; unavailable when it cannot be attached (permission,
/// already traced) or read; timeout past limits.timeout.
core::result<std::string> read_process_stacks(pid_t pid, const dwfl_limits& limits = {});

}  // namespace faultline::harness
