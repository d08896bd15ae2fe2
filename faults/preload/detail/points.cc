#include "faults/preload/detail/points.h"

#include <cstdint>
#include <cstring>

#include "faults/cuda_errors.h"
#include "faults/nccl_names.h"
#include "faults/families.h"

namespace faultline::agent::detail {
namespace {

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A view [b, e) of the spec text.
struct span {
  const char* b;
  const char* e;
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(e - b); }
  [[nodiscard]] bool empty() const noexcept { return b == e; }
};

span trim(span s) noexcept {
  while (s.b < s.e && is_space(*s.b)) ++s.b;
  while (s.e > s.b && is_space(s.e[-1])) --s.e;
  return s;
}

bool equals(span s, const char* word) noexcept {
  const std::size_t n = std::strlen(word);
  return s.size() == n && std::memcmp(s.b, word, n) == 0;
}

// Where `needle` next occurs in s, or s.e.
const char* find(span s, const char* needle) noexcept {
  const std::size_t n = std::strlen(needle);
  for (const char* p = s.b; p + n <= s.e; ++p)
    if (std::memcmp(p, needle, n) == 0) return p;
  return s.e;
}

// The '=' that ends an item's name (faults::item_name_end: the '=' of an @rank= filter is the
// filter's), or s.e.
const char* name_end(span s) noexcept {
  const std::size_t at = faults::item_name_end(std::string_view(s.b, s.size()));
  return at == std::string_view::npos ? s.e : s.b + at;
}

bool parse_u64(span s, std::uint64_t& out) noexcept {
  s = trim(s);
  if (s.empty()) return false;
  std::uint64_t v = 0;
  for (const char* p = s.b; p < s.e; ++p) {
    if (*p < '0' || *p > '9') return false;
    const std::uint64_t digit = static_cast<std::uint64_t>(*p - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  out = v;
  return true;
}

// "5", "0.5", "12.25" percent -> parts per billion (at most 7 decimals, at most 100%).
bool parse_percent(span s, std::uint32_t& ppb) noexcept {
  s = trim(s);
  const char* dot = s.b;
  while (dot < s.e && *dot != '.') ++dot;
  std::uint64_t whole = 0;
  if (!parse_u64({s.b, dot}, whole) || whole > 100) return false;
  std::uint64_t frac = 0;
  std::uint64_t scale = 10'000'000;  // ppb per percent
  if (dot < s.e) {
    const span digits{dot + 1, s.e};
    if (digits.empty() || digits.size() > 7) return false;
    for (const char* p = digits.b; p < digits.e; ++p) {
      if (*p < '0' || *p > '9') return false;
      scale /= 10;
      frac += static_cast<std::uint64_t>(*p - '0') * scale;
    }
  }
  const std::uint64_t total = whole * 10'000'000 + frac;
  if (total > 1'000'000'000) return false;
  ppb = static_cast<std::uint32_t>(total);
  return true;
}

bool parse_duration(span s, std::uint64_t& ns) noexcept {
  s = trim(s);
  const char* unit = s.b;
  while (unit < s.e && *unit >= '0' && *unit <= '9') ++unit;
  std::uint64_t n = 0;
  if (!parse_u64({s.b, unit}, n)) return false;
  const span u = trim({unit, s.e});
  std::uint64_t factor = 0;
  if (equals(u, "ns")) factor = 1;
  else if (equals(u, "us")) factor = 1'000;
  else if (equals(u, "ms")) factor = 1'000'000;
  else if (equals(u, "s")) factor = 1'000'000'000;
  else return false;
  if (n > UINT64_MAX / factor) return false;
  ns = n * factor;
  return true;
}

// fail's code: a positive number, a CUDA driver error name (cuda/ points), an ncclResult_t name
// (nccl/ points) or an errno name (spawn/parent).
bool parse_code(span s, int& code) noexcept {
  s = trim(s);
  if (!s.empty() && *s.b >= '0' && *s.b <= '9') {
    std::uint64_t v = 0;
    if (!parse_u64(s, v) || v == 0 || v > INT32_MAX) return false;
    code = static_cast<int>(v);
    return true;
  }
  code = faults::cuda_error_from_name(s.b, s.size());
  if (code != 0) return true;
  code = faults::nccl_result_value(std::string_view(s.b, s.size()));  // nccl/ points
  if (code > 0) return true;
  for (int e = 1; e < 4096; ++e) {  // an errno name (spawn/parent's fail)
    const char* name = ::strerrorname_np(e);
    if (name != nullptr && equals(s, name)) {
      code = e;
      return true;
    }
  }
  return false;
}

bool parse_term(span s, point_term& t) noexcept {
  s = trim(s);
  t = point_term{};
  if (const char* pct = find(s, "%"); pct != s.e) {
    if (!parse_percent({s.b, pct}, t.probability_ppb)) return false;
    s = trim({pct + 1, s.e});
  }
  if (const char* star = find(s, "*"); star != s.e && find({s.b, star}, "(") == star) {
    if (!parse_u64({s.b, star}, t.remaining) || t.remaining == 0) return false;
    t.limited = true;
    s = trim({star + 1, s.e});
  }
  span name = s, args{s.e, s.e};
  bool has_args = false;
  if (const char* open = find(s, "("); open != s.e) {
    if (s.e[-1] != ')') return false;
    name = trim({s.b, open});
    args = {open + 1, s.e - 1};
    has_args = true;
  }
  // The action and what it takes: the one table of the grammar (faults/families.h).
  const faults::action_description* described = faults::find_action(std::string_view(name.b, name.size()));
  if (described == nullptr) return false;
  switch (described->kind) {
    case faults::action_kind::off: t.action = point_action::off; break;
    case faults::action_kind::fail: t.action = point_action::fail; break;
    case faults::action_kind::delay: t.action = point_action::delay; break;
    case faults::action_kind::kill: t.action = point_action::kill; break;
    case faults::action_kind::abort: t.action = point_action::abort; break;
    case faults::action_kind::teardown: t.action = point_action::teardown; break;
    case faults::action_kind::print: t.action = point_action::print; break;
    case faults::action_kind::stop: t.action = point_action::stop; break;
    case faults::action_kind::pause: return false;  // a rendezvous is the fault engine's
  }
  switch (described->args) {
    case faults::action_args::none:
      return !has_args;
    case faults::action_args::optional_code:
      return !has_args || parse_code(args, t.code);
    case faults::action_args::duration:
      return has_args && parse_duration(args, t.delay_ns);
    case faults::action_args::device: {
      if (!has_args) return false;
      if (equals(trim(args), "device")) {
        t.device = current_device;
        return true;
      }
      std::uint64_t d = 0;
      if (!parse_u64(args, d) || d > 1024) return false;
      t.device = static_cast<int>(d);
      return true;
    }
    case faults::action_args::rendezvous:
      return false;
  }
  return false;
}

// Whether `pattern` (a name, or a prefix and '*') covers `name`: 0 = no, else higher is more
// specific (an exact name beats every prefix, a longer prefix a shorter one).
std::size_t name_rank(span pattern, const char* name) noexcept {
  const std::size_t n = std::strlen(name);
  if (pattern.size() == n && std::memcmp(pattern.b, name, n) == 0) return SIZE_MAX / 4;
  if (!pattern.empty() && pattern.e[-1] == '*') {
    const std::size_t prefix = pattern.size() - 1;
    if (prefix <= n && std::memcmp(pattern.b, name, prefix) == 0) return prefix + 1;
  }
  return 0;
}

// How well the item pattern `pattern` ("point" or "point@filter") covers `point` in a process
// whose names are `programs`: 0 = not at all, else higher is more specific; an item with a
// filter that matches beats the same one without.
std::size_t match_rank(span pattern, const char* point, const char* const* programs) noexcept {
  const char* at = find(pattern, "@");
  const std::size_t rank = name_rank({pattern.b, at}, point);
  if (rank == 0 || at == pattern.e) return rank * 2;
  const span filter{at + 1, pattern.e};
  for (const char* const* p = programs; p != nullptr && *p != nullptr; ++p) {
    if (name_rank(filter, *p) != 0) return rank * 2 + 1;
  }
  return 0;
}

// Whether the family of the item pattern `pattern` (faults/families.h) takes `t`'s action and
// the pattern's filter: for a wildcard, some family it covers must.
bool family_takes(span pattern, const point_term& t) noexcept {
  std::string_view name(pattern.b, pattern.size());
  const std::size_t at = name.find('@');
  const bool filtered = at != std::string_view::npos;
  name = faults::head(name, at);
  const bool wild = !name.empty() && name.back() == '*';
  if (wild) name.remove_suffix(1);
  faults::action_kind kind = faults::action_kind::off;
  switch (t.action) {
    case point_action::off: kind = faults::action_kind::off; break;
    case point_action::fail: kind = faults::action_kind::fail; break;
    case point_action::delay: kind = faults::action_kind::delay; break;
    case point_action::kill: kind = faults::action_kind::kill; break;
    case point_action::abort: kind = faults::action_kind::abort; break;
    case point_action::teardown: kind = faults::action_kind::teardown; break;
    case point_action::print: kind = faults::action_kind::print; break;
    case point_action::stop: kind = faults::action_kind::stop; break;
  }
  for (const auto& f : faults::family_table) {
    const bool covers = wild ? faults::wildcard_covers(name, f) : faults::family_of(name) == &f;
    if (!covers || !f.takes(kind)) continue;
    if (filtered && f.filter == faults::filter_kind::none) continue;
    if (kind == faults::action_kind::teardown && t.device == current_device && f.injector != faults::injector::cuda) continue;
    return true;
  }
  return false;
}

}  // namespace

bool item_understood(const char* item, std::size_t length) noexcept {
  const span all = trim({item, item + length});
  const char* eq = name_end(all);
  if (eq == all.e) return false;
  const span pattern = trim({all.b, eq});
  if (pattern.empty() || pattern.size() > max_pattern_chars) return false;
  std::size_t count = 0;
  const span terms{eq + 1, all.e};
  for (const char* at = terms.b; at <= terms.e;) {
    const char* arrow = find({at, terms.e}, "->");
    point_term t;
    if (count == max_point_terms || !parse_term({at, arrow}, t) || !family_takes(pattern, t)) return false;
    ++count;
    at = arrow + 2;
  }
  return count > 0;
}

void plan_point(const char* spec, const char* point, point_plan& plan, const char* const* programs) noexcept {
  plan = point_plan{};
  if (spec == nullptr) return;
  const span all{spec, spec + std::strlen(spec)};
  std::size_t best = 0;
  span best_item{nullptr, nullptr};
  span best_pattern{nullptr, nullptr};
  for (const char* at = all.b; at <= all.e;) {
    const char* end = find({at, all.e}, ";");
    const span item = trim({at, end});
    at = end + 1;
    if (item.empty()) continue;
    const char* eq = name_end(item);
    if (eq == item.e) continue;
    const span pattern = trim({item.b, eq});
    const std::size_t rank = match_rank(pattern, point, programs);
    if (rank > best) {
      best = rank;
      best_item = {eq + 1, item.e};
      best_pattern = pattern;
    }
  }
  if (best == 0 || best_pattern.size() > max_pattern_chars) return;
  std::size_t count = 0;
  for (const char* at = best_item.b; at <= best_item.e;) {
    const char* arrow = find({at, best_item.e}, "->");
    if (count == max_point_terms || !parse_term({at, arrow}, plan.terms[count]) ||
        !family_takes(best_pattern, plan.terms[count]))
      return;
    ++count;
    at = arrow + 2;
  }
  std::memcpy(plan.pattern, best_pattern.b, best_pattern.size());
  plan.pattern[best_pattern.size()] = '\0';
  plan.term_count = count;
  plan.enabled = count > 0;
}

point_term evaluate_plan(point_plan& plan, std::uint64_t (*draw)(), run_count_claim claim) noexcept {
  for (std::size_t i = 0; i < plan.term_count; ++i) {
    point_term& t = plan.terms[i];
    if (t.limited && claim == nullptr && t.remaining == 0) continue;
    if (t.probability_ppb < 1'000'000'000) {
      // The top 53 bits as a fraction of one, against the chance in parts per billion, as the
      // fault engine draws (faults/engine.cc).
      const double unit = static_cast<double>(draw() >> 11) * 0x1.0p-53;
      if (!(unit * 1e9 < static_cast<double>(t.probability_ppb))) continue;
    }
    if (t.limited) {
      if (claim != nullptr) {
        if (!claim(plan.pattern, i, t.remaining)) continue;
      } else {
        --t.remaining;
      }
    }
    return t;
  }
  return point_term{};
}

point_term evaluate_plan(point_plan& plan, std::uint64_t (*draw)()) noexcept {
  return evaluate_plan(plan, draw, nullptr);
}

bool parse_seed_text(const char* text, std::uint64_t& out) noexcept {
  if (text == nullptr || *text == '\0') return false;
  const span s{text, text + std::strlen(text)};
  if (s.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    std::uint64_t v = 0;
    if (s.size() > 18) return false;
    for (const char* p = text + 2; p < s.e; ++p) {
      int d = (*p >= '0' && *p <= '9') ? *p - '0'
            : (*p >= 'a' && *p <= 'f') ? *p - 'a' + 10
            : (*p >= 'A' && *p <= 'F') ? *p - 'A' + 10 : -1;
      if (d < 0) return false;
      v = v << 4 | static_cast<std::uint64_t>(d);
    }
    out = v;
    return true;
  }
  return parse_u64(s, out);
}

}  // namespace faultline::agent::detail
