// Private to the preloaded libraries: where a function the spec names was inlined, as the command
// found it in the program's DWARF before run 1 (harness/run/elf_functions.h, inlined_sites) and
// handed it over in FAULTLINE_INLINED, so that the agent itself never reads DWARF (it links
// nothing but libc) and pays nothing when no item names a function. The lock/ points' @function
// filter matches a frame inside one of a site's ranges; an fn/ point sets its breakpoint at a
// site's entry.
//
//   FAULTLINE_INLINED := site (';' site)*
//   site := FUNCTION ':' CALLER ':' DEV ':' INODE ':' ENTRY ':' RANGE (',' RANGE)*
//   RANGE := LOW '-' HIGH
// FUNCTION is the inlined function's name (its linkage name where it has one, as .symtab would
// name it), CALLER the function it was inlined into; DEV and INODE (decimal) name the module's
// file (st_dev, st_ino: the same file whatever path loaded it); ENTRY, LOW and HIGH are hex
// link-time addresses of that file (the loader's bias is added here), [LOW, HIGH) a range of
// the site's code.
//
//   detail::for_each_inlined_site(getenv("FAULTLINE_INLINED"), [&](const detail::inlined_site& s) { ...; });
//
// Allocation-free: a site is parsed into fixed buffers; an over-long name or too many ranges
// skip the site (the command keeps within these bounds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace faultline::agent::detail {

inline constexpr const char* inlined_env = "FAULTLINE_INLINED";

struct inlined_site {
  static constexpr unsigned max_name = 127;
  static constexpr unsigned max_ranges = 8;
  char function[max_name + 1] = {};
  char caller[max_name + 1] = {};
  std::uint64_t dev = 0, inode = 0;
  std::uint64_t entry = 0;
  std::uint64_t low[max_ranges] = {}, high[max_ranges] = {};
  unsigned ranges = 0;
};

namespace inlined_detail {

inline bool copy_name(const char* b, const char* e, char* out) noexcept {
  const std::size_t n = static_cast<std::size_t>(e - b);
  if (n == 0 || n > inlined_site::max_name) return false;
  std::memcpy(out, b, n);
  out[n] = '\0';
  return true;
}

inline bool number(const char*& at, const char* e, unsigned base, std::uint64_t& out) noexcept {
  out = 0;
  const char* start = at;
  for (; at < e; ++at) {
    unsigned d;
    const char c = *at;
    if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
    else if (base == 16 && c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
    else break;
    out = out * base + d;
  }
  return at != start;
}

}  // namespace inlined_detail

/// Calls fn(site) for every well-formed site of `text` (FAULTLINE_INLINED's value; null: none).
template <class Fn>
void for_each_inlined_site(const char* text, Fn&& fn) noexcept {
  if (text == nullptr) return;
  for (const char* at = text; *at != '\0';) {
    const char* end = std::strchr(at, ';');
    if (end == nullptr) end = at + std::strlen(at);
    inlined_site s;
    const char* p = at;
    const auto field_end = [&] {
      const char* c = p;
      while (c < end && *c != ':') ++c;
      return c;
    };
    bool ok = true;
    const char* f = field_end();
    ok = ok && f < end && inlined_detail::copy_name(p, f, s.function);
    p = f + 1;
    f = ok ? field_end() : end;
    ok = ok && f < end && inlined_detail::copy_name(p, f, s.caller);
    p = f + 1;
    ok = ok && p < end && inlined_detail::number(p, end, 10, s.dev) && p < end && *p++ == ':';
    ok = ok && p < end && inlined_detail::number(p, end, 10, s.inode) && p < end && *p++ == ':';
    ok = ok && p < end && inlined_detail::number(p, end, 16, s.entry) && p < end && *p++ == ':';
    while (ok && p < end) {
      std::uint64_t lo = 0, hi = 0;
      ok = s.ranges < inlined_site::max_ranges && inlined_detail::number(p, end, 16, lo) && p < end && *p++ == '-' &&
           inlined_detail::number(p, end, 16, hi) && lo < hi;
      if (!ok) break;
      s.low[s.ranges] = lo;
      s.high[s.ranges] = hi;
      ++s.ranges;
      if (p < end && *p == ',') ++p;
      else if (p != end) ok = false;
    }
    if (ok && s.ranges > 0) fn(static_cast<const inlined_site&>(s));
    at = *end == ';' ? end + 1 : end;
  }
}

}  // namespace faultline::agent::detail
