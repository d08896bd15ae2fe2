// Process-exit safety for the allocator: knowing that exit has begun, and keeping device calls
// out of a runtime that is being torn down (DESIGN.md §5.1, §13.2).
//
// At exit, atexit handlers and static destructors run in reverse order of registration, and the
// device runtime registers its own teardown when it first initialises. faultline's exit hook is
// registered right after the per-device resource map is constructed, which itself initialises the
// runtime first, so the hook runs before the map's destructor and before the runtime teardown.
// The hook:
//   1. sets `process_is_exiting()`: destructors of pools, adaptors and the map now make no device
//      call; they leak what they hold and report it (`bytes_leaked_at_exit()`, one stderr line);
//   2. refuses every allocator device call that begins from now on (errc::refused);
//   3. waits for the calls already inside the device to come out, however long the load makes
//      them (a call left inside when the teardown starts is what crashes at exit); after 2 s it
//      says on stderr that it is still waiting. FAULTLINE_EXIT_DRAIN_MS=N opts into a bound: a
//      thread still inside after N ms is reported on stderr and exit goes on without it.
//
//   // code with its own static resources, constructed after the device runtime is up:
//   static my_cache cache;                 // destructor checks alloc::process_is_exiting()
//   alloc::install_exit_hook();            // runs before `cache`'s destructor at exit
//
// Thread safety: every function may be called from any thread at any time, including from
// atexit handlers and destructors during exit.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace faultline::core::alloc {

/// True once faultline's exit hook has started. Destructors consult it to make no device call.
[[nodiscard]] bool process_is_exiting() noexcept;

/// Registers faultline's exit hook with atexit. The hook runs before every atexit handler and
/// static destructor registered earlier, so call it after the device runtime is initialised and
/// after constructing the statics it must protect. Registering more than once is allowed (the
/// hook acts once, at its first run). The per-device resource map calls this for you.
/// Bug point "bug/alloc/no-drain" is read at the first registration: when it fires, the hook
/// only sets process_is_exiting() (neither refusing nor draining device calls); when
/// "bug/alloc/bounded-drain" fires, the drain gives up after 2 s as it did before the fix.
/// Errors: internal when atexit refuses the registration.
status install_exit_hook() noexcept;

/// Bytes that resources chose to leak because the process was exiting (instead of calling into
/// the device). Counted by destructors that ran after the exit hook.
[[nodiscard]] std::uint64_t bytes_leaked_at_exit() noexcept;

/// Allocator device calls refused because they began after exit started.
[[nodiscard]] std::uint64_t calls_refused_at_exit() noexcept;

/// Allocator device calls inside the device right now. After the exit hook has drained them it
/// stays 0 (new calls are refused); a non-zero value read after the runtime's teardown means a
/// call was left running into it.
[[nodiscard]] int device_calls_in_flight() noexcept;

/// The drain bound the exit hook uses: FAULTLINE_EXIT_DRAIN_MS when set to a number of
/// milliseconds, else 0: no bound, exit waits for every call in flight. A malformed value is
/// reported on stderr and taken as 0.
[[nodiscard]] std::uint64_t exit_drain_timeout_ms() noexcept;

}  // namespace faultline::core::alloc
