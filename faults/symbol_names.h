// How an optimizing compiler renames a function it transforms, for everything that finds a
// program's functions by name (the lock/ points' @function filter, fn/ points, the command's check
// before run 1): GCC's clones keep the source name and add a suffix, so `@take_slot` names
// `take_slot.isra.0` (scalar replacement of aggregates), `take_slot.constprop.0` (a constant
// argument propagated), `take_slot.part.0` (the outlined rest of a partly inlined function),
// `take_slot.cold` (its cold blocks, split into .text.unlikely) and their combinations
// (`take_slot.constprop.0.isra.0`, `take_slot.isra.0.cold`); LLVM's ThinLTO adds `.llvm.N`.
//
//   faults::clone_base("take_slot.isra.0");        // "take_slot"
//   faults::is_cold_part("take_slot.isra.0.cold"); // true: not an entry of the function
//
// Header only, allocation-free, and no std::string_view member that can throw (substr): the
// preloaded agents read it inside a user's process without libstdc++.
#pragma once

#include <string_view>

namespace faultline::faults {

/// `symbol` without a compiler's clone suffix: the source function's name, or `symbol` itself
/// when it has none. A suffix is a run of ".WORD" parts, each a known clone marker (isra,
/// constprop, part, cold, lto_priv, llvm) or a number following one.
constexpr std::string_view clone_base(std::string_view symbol) noexcept {
  constexpr std::string_view markers[] = {"isra", "constprop", "part", "cold", "lto_priv", "llvm"};
  std::size_t end = symbol.size();
  std::size_t confirmed = symbol.size();  // the end after the last marker read (right to left)
  while (end > 0) {
    const std::size_t dot = symbol.rfind('.', end - 1);
    if (dot == std::string_view::npos || dot == 0) break;
    const std::string_view part(symbol.data() + dot + 1, end - dot - 1);
    bool number = !part.empty();
    for (char c : part) number = number && c >= '0' && c <= '9';
    bool marker = false;
    for (std::string_view m : markers) marker = marker || part == m;
    if (!number && !marker) break;
    if (marker) confirmed = dot;  // a number counts only with a marker before it ("v.2" is a name)
    end = dot;
  }
  return std::string_view(symbol.data(), confirmed);
}

/// Whether `symbol` is a clone of `function` (clone_base(symbol) == function), or `function`
/// itself.
constexpr bool names_function(std::string_view symbol, std::string_view function) noexcept {
  return symbol == function || (symbol.size() > function.size() && symbol.starts_with(function) &&
                                symbol[function.size()] == '.' && clone_base(symbol) == function);
}

/// Whether `symbol` is the cold part of a function (`f.cold`, `f.isra.0.cold`): code split away
/// from the function's entry, reached only by a jump from inside it.
constexpr bool is_cold_part(std::string_view symbol) noexcept {
  const std::size_t base = clone_base(symbol).size();
  const std::string_view suffix(symbol.data() + base, symbol.size() - base);
  return suffix.ends_with(".cold") || suffix.find(".cold.") != std::string_view::npos;
}

static_assert(clone_base("take_slot.isra.0") == "take_slot");
static_assert(clone_base("take_slot.constprop.0.isra.0") == "take_slot");
static_assert(clone_base("take_slot.part.0") == "take_slot");
static_assert(clone_base("take_slot.cold") == "take_slot");
static_assert(clone_base("take_slot.isra.0.cold") == "take_slot");
static_assert(clone_base("take_slot") == "take_slot");
static_assert(clone_base("v.2") == "v.2");
static_assert(clone_base(".cold") == ".cold");
static_assert(clone_base("a.b.isra.0") == "a.b");
static_assert(names_function("take_slot.isra.0", "take_slot"));
static_assert(!names_function("take_slots.isra.0", "take_slot"));
static_assert(!names_function("take_slot_x", "take_slot"));
static_assert(is_cold_part("f.isra.0.cold") && !is_cold_part("f.isra.0"));

}  // namespace faultline::faults
