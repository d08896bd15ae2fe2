// Who a process is, and whether it is still alive: a pid plus the process's start time, so that a
// pid reused by a later process is not mistaken for the one recorded (the shared accounting's slot
// owners, DESIGN.md §5.3; the device IPC registry's importers).
//
// Every function is async-signal-safe (open/read/close/kill, no allocation): the exit handlers
// call them.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace faultline::core {

/// `pid`'s start time in clock ticks since boot (/proc/PID/stat field 22), or 0 when it cannot be
/// read (no such process, /proc not mounted).
std::uint64_t process_start_time(pid_t pid) noexcept;

/// The calling process's host pid (core::host_pid) and start time, read once and cached.
pid_t self_pid() noexcept;
std::uint64_t self_start_time() noexcept;
/// Re-reads the cache after a fork (the child is a different process).
void refresh_self_identity() noexcept;

enum class liveness { alive, dead };

/// Whether the process (`pid`, `start_time`) is alive: /proc/PID/stat exists, its state is not
/// zombie or dead, it is not exiting (PF_EXITING: it runs no more user code), and its start time
/// matches. A reused pid (other start time) is dead. Where
/// /proc cannot answer for a reason other than "no such process" it falls back to kill(pid, 0).
/// With `pid_only` (bug/accounting/pid-only-liveness) only kill(pid, 0) is asked.
liveness process_liveness(pid_t pid, std::uint64_t start_time, bool pid_only = false) noexcept;

}  // namespace faultline::core
