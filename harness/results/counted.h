// Counted nouns in what the harness and its reports print: "1 run", "2 runs", "0 variants".
// One rule for every message, so that no count reads "1 variants".
//
//   out << harness::counted(v.runs, "run");           // "1 run", "30 runs"
//   text += thousands(n) + " " + harness::plural(n, "variant");
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace faultline::harness {

/// `noun` for a count of one, else its plural (`many`, or `noun` + "s" when none is given).
inline std::string plural(std::uint64_t n, std::string_view noun, std::string_view many = {}) {
  if (n == 1) return std::string(noun);
  return many.empty() ? std::string(noun) + "s" : std::string(many);
}

/// "1 run", "2 runs": the count and its noun.
inline std::string counted(std::uint64_t n, std::string_view noun, std::string_view many = {}) {
  return std::to_string(n) + " " + plural(n, noun, many);
}

}  // namespace faultline::harness
