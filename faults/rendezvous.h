// A two-party rendezvous that works across threads and processes: what the `pause(name)` action
// uses to force a race window open (DESIGN.md §6.6).
//
//   // thread A, after its check:        // thread B (or another process), after its removal:
//   faults::rendezvous("unreg", 5s);     faults::rendezvous("unreg", 5s);
//
// The first party to arrive at `name` blocks until a second party arrives at the same name (any
// thread of any process of the same user); then both go on and the rendezvous is reusable: a
// third arrival waits for a fourth. In specs this is
// `registry/save/after-check=pause(unreg);registry/unregister/after-remove=pause(unreg)`.
//
// Mechanism: a 64-byte POSIX shared-memory object "/faultline-rv-<uid>-<name>" holding one futex
// word (0 = nobody waiting, else the waiting thread's id). The party that releases a waiter unlinks
// the object, so nothing is left in /dev/shm after a completed rendezvous. A waiter whose thread
// died (killed process) is detected through its thread id and replaced; a waiter whose object was
// unlinked under it moves to the new object within 100 ms.
//
// Thread safety: any thread may call it at any time. It takes no lock of the caller's.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/status.h"

namespace faultline::faults {

/// Meets one other party at rendezvous `name` ([A-Za-z0-9_.-], at most 128 characters), waiting
/// at most `timeout` (steady clock, EINTR-safe).
/// Returns ok when met; errc::timeout when no partner came in time (this party then withdraws,
/// so a late partner becomes the first party of a new meeting); invalid_argument for a bad name
/// or a negative timeout; a system error (io_error, ...) when the shared object cannot be made or
/// belongs to another user.
core::status rendezvous(std::string_view name, std::chrono::nanoseconds timeout) noexcept;

/// The shared-memory object name used for `name` ("/faultline-rv-1000-unreg").
std::string rendezvous_object_name(std::string_view name);

}  // namespace faultline::faults
