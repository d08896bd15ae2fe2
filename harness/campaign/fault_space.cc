#include "harness/campaign/fault_space.h"

#include <cctype>
#include <optional>

#include "core/points/random.h"
#include "faults/spec.h"

namespace faultline::harness {
namespace {

// A number as written in a template: digits, an optional fraction, an optional unit.
struct number {
  std::uint64_t scaled = 0;  // value * 10^decimals
  unsigned decimals = 0;
  std::string unit;          // "", "ns", "us", "ms" or "s"
  std::size_t end = 0;       // index just past it
};

std::optional<number> read_number(std::string_view s, std::size_t i) {
  number n;
  std::size_t j = i;
  bool any = false;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
    if (n.scaled > (~std::uint64_t{0} - 9) / 10) return std::nullopt;
    n.scaled = n.scaled * 10 + static_cast<std::uint64_t>(s[j] - '0');
    ++j;
    any = true;
  }
  if (!any) return std::nullopt;
  // A fraction, but not the first dot of "..".
  if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
    ++j;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
      if (n.scaled > (~std::uint64_t{0} - 9) / 10 || n.decimals == 7) return std::nullopt;
      n.scaled = n.scaled * 10 + static_cast<std::uint64_t>(s[j] - '0');
      ++n.decimals;
      ++j;
    }
  }
  std::size_t u = j;
  while (u < s.size() && std::isalpha(static_cast<unsigned char>(s[u]))) ++u;
  n.unit = std::string(s.substr(j, u - j));
  n.end = u;
  return n;
}

std::uint64_t pow10(unsigned e) {
  std::uint64_t p = 1;
  while (e--) p *= 10;
  return p;
}

// Nanoseconds per unit; 0 for an unknown unit.
std::uint64_t unit_ns(std::string_view unit) {
  if (unit == "ns") return 1;
  if (unit == "us") return 1'000;
  if (unit == "ms") return 1'000'000;
  if (unit == "s") return 1'000'000'000;
  return 0;
}

std::string with_decimals(std::uint64_t scaled, unsigned decimals) {
  if (decimals == 0) return std::to_string(scaled);
  const std::uint64_t p = pow10(decimals);
  std::string frac = std::to_string(scaled % p);
  frac.insert(0, decimals - frac.size(), '0');
  return std::to_string(scaled / p) + "." + frac;
}

// Uniform over [lo, hi] in the log2 domain, integers only (portable): an octave is drawn first,
// then a value within it.
std::uint64_t log_uniform(faults::generator& g, std::uint64_t lo, std::uint64_t hi) {
  if (lo == 0) lo = 1;
  if (hi <= lo) return lo;
  auto octave = [](std::uint64_t v) { return 63u - static_cast<unsigned>(__builtin_clzll(v)); };
  const unsigned e = static_cast<unsigned>(g.between(octave(lo), octave(hi)));
  const std::uint64_t from = std::max(lo, std::uint64_t{1} << e);
  const std::uint64_t to = e >= 63 ? hi : std::min(hi, (std::uint64_t{1} << (e + 1)) - 1);
  return g.between(from, to);
}

enum class pick { low, high, random };

// The template with every range replaced: by its low end, its high end, or a draw.
core::result<std::string> instantiate(std::string_view item, pick how, faults::generator* g) {
  const std::size_t eq = item.find('=');
  if (eq == std::string_view::npos) return std::string(item);  // faults::parse will say what is wrong
  std::string out(item.substr(0, eq + 1));
  std::size_t i = eq + 1;
  auto bad = [&](const std::string& why) {
    return core::status(core::errc::invalid_argument, "fault space item '" + std::string(item) + "': " + why);
  };
  while (i < item.size()) {
    const bool starts_number = std::isdigit(static_cast<unsigned char>(item[i])) &&
                               (i == 0 || !std::isalnum(static_cast<unsigned char>(item[i - 1])));
    auto lo = starts_number ? read_number(item, i) : std::nullopt;
    if (!lo || item.substr(lo->end, 2) != "..") {
      const std::size_t end = lo ? lo->end : i + 1;
      out.append(item.substr(i, end - i));
      i = end;
      continue;
    }
    auto hi = read_number(item, lo->end + 2);
    if (!hi) return bad("a range needs a number after '..'");
    const bool durations = !lo->unit.empty() || !hi->unit.empty();
    if (durations) {
      const std::uint64_t lu = unit_ns(lo->unit), hu = unit_ns(hi->unit);
      if (lu == 0 || hu == 0) return bad("a duration range needs a unit (ns, us, ms, s) on both ends");
      if (lo->decimals || hi->decimals) return bad("durations are whole numbers");
      const std::uint64_t lo_ns = lo->scaled * lu, hi_ns = hi->scaled * hu;
      if (lo_ns > hi_ns) return bad("the range " + with_decimals(lo->scaled, 0) + lo->unit + ".." + with_decimals(hi->scaled, 0) + hi->unit + " is descending");
      // Drawn and written in the largest unit that both ends are whole numbers of.
      std::uint64_t unit = 1'000'000'000;
      while (unit > 1 && (lo_ns % unit != 0 || hi_ns % unit != 0)) unit /= 1000;
      const std::uint64_t a = lo_ns / unit, b = hi_ns / unit;
      const std::uint64_t v = how == pick::low ? a : how == pick::high ? b : log_uniform(*g, a, b);
      out += std::to_string(v) + (unit == 1 ? "ns" : unit == 1'000 ? "us" : unit == 1'000'000 ? "ms" : "s");
    } else {
      const unsigned d = std::max(lo->decimals, hi->decimals);
      const std::uint64_t a = lo->scaled * pow10(d - lo->decimals), b = hi->scaled * pow10(d - hi->decimals);
      if (a > b) return bad("the range " + with_decimals(lo->scaled, lo->decimals) + ".." + with_decimals(hi->scaled, hi->decimals) + " is descending");
      const std::uint64_t v = how == pick::low ? a : how == pick::high ? b : g->between(a, b);
      out += with_decimals(v, d);
    }
    i = hi->end;
  }
  return out;
}

core::status check_item(std::string_view tmpl, const std::string& instance) {
  auto parsed = faults::parse(instance);
  auto bad = [&](const std::string& why) {
    return core::status(core::errc::invalid_argument, "fault space item '" + std::string(tmpl) + "': " + why);
  };
  if (!parsed) return bad(parsed.error().message());
  if (parsed->items.size() != 1) return bad("an item names exactly one point");
  const faults::item& it = parsed->items.front();
  if (it.is_wildcard()) return bad("a space names points, not wildcards");
  if (it.point.rfind("bug/", 0) == 0) return bad("bug points are not part of a fault space (verify plants them)");
  return {};
}

}  // namespace

core::status check_fault_space(const std::vector<std::string>& space) {
  std::vector<std::string> points;
  for (const auto& item : space) {
    const std::string point = item.substr(0, item.find('='));
    for (const auto& p : points)
      if (p == point) return core::status(core::errc::invalid_argument, "fault space names point '" + point + "' twice");
    points.push_back(point);
    for (pick end : {pick::low, pick::high}) {
      auto instance = instantiate(item, end, nullptr);
      if (!instance) return instance.error();
      if (auto s = check_item(item, *instance); !s) return s;
    }
  }
  return {};
}

core::result<std::string> draw_faults(const std::vector<std::string>& space, std::uint64_t seed) {
  if (space.empty()) return std::string();
  if (auto s = check_fault_space(space); !s) return s;
  faults::generator g(seed);
  std::vector<bool> chosen(space.size());
  bool any = false;
  for (std::size_t i = 0; i < space.size(); ++i) any |= (chosen[i] = (g.next() >> 63) != 0);
  if (!any) chosen[g.between(0, space.size() - 1)] = true;
  std::string spec;
  for (std::size_t i = 0; i < space.size(); ++i) {
    if (!chosen[i]) continue;
    auto instance = instantiate(space[i], pick::random, &g);
    if (!instance) return instance.error();
    if (auto s = check_item(space[i], *instance); !s) return s;
    spec += (spec.empty() ? "" : ";") + *instance;
  }
  return spec;
}

std::uint64_t fault_draw_seed(std::uint64_t soak_seed, std::uint64_t run) noexcept {
  return faults::splitmix64_mix(soak_seed ^ faults::splitmix64_mix(run + faults::splitmix64_step));
}

}  // namespace faultline::harness
