// faultline's seeded random source: splitmix64 over one atomic counter, mapped by hand.
//
// The fault engine holds one per process, seeded by configure(); scenarios draw their sizes and
// choices from ones seeded by the run's seed. Each draw advances the counter atomically, so draws
// from many threads never repeat or tear, and a single thread's draws under a fixed seed are the
// same on every run and every standard library (no std distributions involved).
//
//   points::generator g(seed);
//   std::size_t bytes = g.between(256, 1 << 20);   // inclusive bounds
//   bool fire = g.next_unit() < 0.05;
#pragma once

#include <atomic>
#include <cstdint>

namespace faultline::points {

/// splitmix64's output function: a bijective mix of a 64-bit counter value.
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The counter's step (the odd constant closest to 2^64 / golden ratio).
inline constexpr std::uint64_t splitmix64_step = 0x9e3779b97f4a7c15ull;

/// A thread-safe splitmix64 generator.
class generator {
 public:
  explicit generator(std::uint64_t seed = 0) noexcept : state_(seed) {}

  /// Restarts the sequence from `seed`.
  void reseed(std::uint64_t seed) noexcept { state_.store(seed, std::memory_order_relaxed); }

  /// The next 64 random bits.
  std::uint64_t next() noexcept {
    return splitmix64_mix(state_.fetch_add(splitmix64_step, std::memory_order_relaxed) + splitmix64_step);
  }

  /// A double in [0, 1) from the top 53 bits (every value is exactly representable).
  double next_unit() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// Uniform in [lo, hi], both inclusive (lo <= hi). Multiply-shift maps 64 random bits onto the
  /// span without a modulo's bias for small spans.
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi) noexcept {
    const std::uint64_t span = hi - lo + 1;
    if (span == 0) return next();  // the full 64-bit range
    __extension__ using u128 = unsigned __int128;
    return lo + static_cast<std::uint64_t>((static_cast<u128>(next()) * span) >> 64);
  }

 private:
  std::atomic<std::uint64_t> state_;
};

}  // namespace faultline::points

// The spelling of the engine, the scenarios and the harness (this header lived in faults/ until
// core/ needed it too).
namespace faultline::faults {
using points::generator;
using points::splitmix64_mix;
using points::splitmix64_step;
}  // namespace faultline::faults
