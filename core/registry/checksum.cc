// The registry's block checksum: eight independent 64-bit lanes over 64-byte stripes, so the
// multiplies of one stripe overlap (one multiply per word: several GB/s on one core), folded with
// the tail and the length and finished with splitmix64's avalanche. Each lane step
// `rotl(acc + w, 29) * k0` is a bijection of the lane for a fixed word and injective in the word,
// so two inputs that differ in one word always leave different lane states behind (a one-word
// difference is never missed). Words are read little-endian on every host, so a checksum means
// the same everywhere.
#include <bit>
#include <cstring>

#include "core/registry/registry.h"

namespace faultline::core::registry {

namespace {

constexpr std::uint64_t k0 = 0x9e3779b97f4a7c15ull;
constexpr std::uint64_t k1 = 0xd1b54a32d192ed03ull;
constexpr std::uint64_t k2 = 0xaf251af3b0f025b5ull;
constexpr std::uint64_t k3 = 0xe7037ed1a0b428dbull;

inline std::uint64_t load64(const unsigned char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

inline std::uint64_t step(std::uint64_t acc, std::uint64_t word) noexcept {
  return std::rotl(acc + word, 29) * k0;
}

inline std::uint64_t avalanche(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t checksum(const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t n = bytes;
  // Eight named lanes rather than an array: the compiler keeps them in registers.
  std::uint64_t l0 = k0, l1 = k1, l2 = k2, l3 = k3, l4 = k0 ^ k2, l5 = k1 ^ k3, l6 = k0 ^ k3, l7 = k1 ^ k2;
  while (n >= 64) {
    l0 = step(l0, load64(p));
    l1 = step(l1, load64(p + 8));
    l2 = step(l2, load64(p + 16));
    l3 = step(l3, load64(p + 24));
    l4 = step(l4, load64(p + 32));
    l5 = step(l5, load64(p + 40));
    l6 = step(l6, load64(p + 48));
    l7 = step(l7, load64(p + 56));
    p += 64;
    n -= 64;
  }
  std::uint64_t h = k2 ^ bytes;
  for (const std::uint64_t l : {l0, l1, l2, l3, l4, l5, l6, l7}) h = (h ^ avalanche(l)) * k0;
  while (n >= 8) {
    h = std::rotl(h ^ (load64(p) * k1), 31) * k3;
    p += 8;
    n -= 8;
  }
  if (n != 0) {
    std::uint64_t w = 0;
    for (std::size_t i = 0; i < n; ++i) w |= std::uint64_t{p[i]} << (8 * i);
    h = std::rotl(h ^ (w * k1) ^ n, 23) * k0;
  }
  return avalanche(h ^ (bytes * k3));
}

}  // namespace faultline::core::registry
