// posix/ and libc/ fault points for any program: libfiu's POSIX preload (fiu_posix_preload.so,
// from libfiu's utilities), which `faultline exec` and agent-env preload after the agent when the
// spec names such points, asks libfiu at each wrapped call (posix/io/rw/write, posix/io/oc/open,
// libc/mm/malloc, ...: libfiu's list); the agent enables each such item of the spec in libfiu
// with a callback that decides by the spec's own terms — probability, counts, FAULTLINE_SEED —
// and records the item reached. Actions: fail(ERRNO) (the call is not made and fails with that
// errno; plain fail gives libfiu's choice of a valid one), delay, kill, abort, print.
// The items reach the program's calls only: the agent's own I/O (points reached, crash reports,
// stack dumps, markers, its kill action, fn/ breakpoints) makes its system calls past libfiu's
// wrappers (detail/sys.h), so it takes no count or draw and loses no record to an injected failure;
// and the items are enabled last in the preload's constructor, after the agent's own set-up.
#pragma once

namespace faultline::agent::posix_points {

/// Enables the posix/ and libc/ items of `spec` in libfiu, when libfiu is in the process (the
/// POSIX preload brings it). True when one was enabled; a spec naming them in a process without
/// libfiu says so on stderr. Called once, from the preload's constructor.
bool install(const char* spec) noexcept;

}  // namespace faultline::agent::posix_points
