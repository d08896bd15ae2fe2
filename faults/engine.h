// The fault engine: turns a fault spec (faults/spec.h) into live fault points, over libfiu.
//
//   if (auto s = faults::configure("sim/*=5%fail(ENOMEM);bug/alloc/no-exit-guard=print", 42); !s) {
//     std::fprintf(stderr, "%s\n", s.to_string().c_str());
//   }
//   ... run the code under test; its FAULTLINE_POINTs now fire ...
//   std::printf("seed=%llu faults=%s fired=%llu\n", faults::current_seed(),
//               faults::current_spec().c_str(), faults::counter("sim/call/alloc").fires);
//   faults::disable_all();
//
// Each spec item is enabled in libfiu as an external-callback failure point under the item's
// pattern, so libfiu's own name and trailing-'*' matching picks the item a point hit belongs to
// (an exact name beats a wildcard; among a spec's wildcards the longest prefix wins). The callback
// evaluates the item's term chain under libfiu's lock and only records the chosen action; the
// action runs after fiu_fail returns, so a delay or pause never holds libfiu's lock.
//
// Actions: fail(code) makes FAULTLINE_POINT return the code (call sites build
// core::status::injected_fault from it); delay sleeps on the steady clock; pause meets a partner
// (faults/rendezvous.h) and on timeout logs "[faultline:injected] pause NAME timed out" and goes
// on; kill sends SIGKILL to the process; abort calls abort(); teardown(N) resets device N's
// context through core::device::current(); print only logs. Every kill, abort, teardown and print
// writes one "[faultline:injected] point=NAME action=..." line to stderr first, so an injected
// death is never mistaken for a real one; fail is tagged through the status it produces.
//
// Randomness: one splitmix64 generator per process, seeded by configure() (default_seed when none
// is given). A fixed seed and the same sequence of hits on one thread give the same fires on every
// run.
//
// Points are armed (core/points/point.h) only while some item is enabled or remote control is
// on; with nothing enabled a point costs one relaxed load.
//
// Thread safety: every function may be called from any thread, also while points are being hit.
// Engine state is never destroyed, so points hit by threads still running during process exit
// stay safe. While armed, a hit takes short locks (the counter table, libfiu's read lock), so
// points do not belong in signal handlers; and since libfiu's lock prefers readers, configure()
// may wait a while when many threads hit points in a tight loop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "faults/spec.h"

namespace faultline::faults {

/// Where a run learns which enabled items its processes reached: the first hit matching an item
/// appends the item's pattern to $FAULTLINE_RUN_DIR/points.PID (when that variable is set). The
/// name is the harness agent's protocol (faults/preload/protocol.h, points_file_prefix).
inline constexpr const char* reached_points_file_prefix = "points.";

/// The seed used when none is given (FAULTLINE_SEED unset).
inline constexpr std::uint64_t default_seed = 1;

/// The basename libfiu's remote control uses by default: "$TMPDIR/fiu-ctrl" (or /tmp), the same
/// prefix fiu-ctrl looks for.
std::string default_fifo_basename();

/// Whether fault points were compiled in (FAULTLINE_FAULTS=ON).
constexpr bool compiled_in() noexcept {
#if defined(FAULTLINE_FAULTS_ENABLED) && FAULTLINE_FAULTS_ENABLED
  return true;
#else
  return false;
#endif
}

/// Replaces the active spec with `spec_text` and reseeds the generator with `seed`.
/// All or nothing: when the spec is malformed (invalid_argument, see faults::parse) the previous
/// configuration stays in force. An empty spec disables every item (and stores the seed).
/// Errors: invalid_argument for a malformed spec; unavailable "faults compiled out
/// (FAULTLINE_FAULTS=OFF)" for a non-empty spec in a build without fault points; internal when
/// libfiu refuses an item (nothing is then enabled).
core::status configure(std::string_view spec_text, std::uint64_t seed = default_seed);

/// configure() from the environment: FAULTLINE_FAULTS (the spec), FAULTLINE_SEED (decimal or
/// 0x-hex unsigned 64-bit; default_seed when unset or empty) and FAULTLINE_FIU_CTRL (1 enables
/// remote control, 0 or empty does nothing). All three are checked before anything is applied;
/// an error names the variable ("FAULTLINE_SEED: expected an unsigned 64-bit integer, found 'x'").
core::status configure_from_environment();

/// Disables every item of the active spec and disarms the points (unless remote control is on).
/// Counters are kept. Never fails.
void disable_all() noexcept;

/// Enables libfiu's remote control over named pipes "<basename>-<pid>.in/.out" (fiu_rc_fifo), so
/// `fiu-ctrl -e NAME PID` (or `fiu-ctrl -c 'enable name=NAME,failnum=N' PID`) enables points of
/// this process from outside. Points stay armed from then on. A point enabled remotely fires like
/// fail(failnum). Calling it again is a no-op (libfiu cannot stop remote control).
/// Errors: io_error when libfiu cannot create the pipes; unavailable when faults are compiled out.
core::status enable_remote_control(const std::string& basename = default_fifo_basename());

/// Whether remote control was enabled in this process.
[[nodiscard]] bool remote_control_enabled() noexcept;

/// The seed of the last successful configure() (default_seed before any).
[[nodiscard]] std::uint64_t current_seed() noexcept;

/// The active spec in canonical form (faults::format), empty when nothing is enabled.
[[nodiscard]] std::string current_spec();

/// How often one point was hit while points were armed, and how often it fired (a fire that
/// only reached an `off` term is not a fire). Kept per exact point name, across configure().
struct point_counter {
  std::string point;
  std::uint64_t hits = 0;
  std::uint64_t fires = 0;
};

/// Counters of every point hit since the last reset_counters(), sorted by name.
[[nodiscard]] std::vector<point_counter> counters();
/// The counters of `point` (zeros when it was never hit).
[[nodiscard]] point_counter counter(std::string_view point);
/// Sets every counter to zero.
void reset_counters() noexcept;

}  // namespace faultline::faults
