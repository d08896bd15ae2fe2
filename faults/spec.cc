#include "faults/spec.h"

#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include "faults/bug_points.h"
#include "faults/cuda_errors.h"
#include "faults/nccl_names.h"

namespace faultline::faults {

namespace {

using core::errc;
using core::status;

// "expected an action (off, fail, ...)" from the one table of actions (faults/families.h).
std::string expected_action() {
  std::string out = "expected an action (";
  for (const auto& a : action_table) out += std::string(a.name) + (&a == &action_table[std::size(action_table) - 1] ? ")" : ", ");
  return out;
}

// Device indices beyond this are certainly typos; the device layer checks the real count.
constexpr std::uint64_t max_device = 1u << 16;
constexpr std::uint32_t ppb_per_percent = 10'000'000;
constexpr int max_percent_decimals = 7;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_word_char(char c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '.'; }
bool is_rendezvous_char(char c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '.' || c == '-'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Parses a run of decimal digits; false on overflow or when `digits` is empty or not all digits.
bool parse_u64(std::string_view digits, std::uint64_t& out) {
  if (digits.empty()) return false;
  std::uint64_t v = 0;
  for (char c : digits) {
    if (!is_digit(c)) return false;
    auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

class parser {
 public:
  explicit parser(std::string_view text) : text_(text) {}

  core::result<spec> run() {
    spec out;
    for (;;) {
      skip_space();
      if (at_end()) break;
      if (peek() == ';') {  // an empty item
        ++pos_;
        continue;
      }
      auto it = parse_item(out);
      if (!it) return it.error();
      out.items.push_back(std::move(*it));
      skip_space();
      if (at_end()) break;
      if (peek() == ';') {
        ++pos_;
        continue;
      }
      return fail_here("expected '->', ';' or end of spec");
    }
    return out;
  }

 private:
  [[nodiscard]] bool at_end() const { return pos_ >= text_.size(); }
  [[nodiscard]] char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void skip_space() {
    while (!at_end() && is_space(text_[pos_])) ++pos_;
  }
  [[nodiscard]] bool at_arrow() const { return text_.substr(pos_).starts_with("->"); }

  // The token shown after "found": a word, "->", one other character, or end of spec.
  [[nodiscard]] std::string found(std::size_t at) const {
    if (at >= text_.size()) return "end of spec";
    if (text_.substr(at).starts_with("->")) return "'->'";
    std::size_t end = at;
    while (end < text_.size() && is_word_char(text_[end])) ++end;
    if (end == at) end = at + 1;
    return "'" + std::string(text_.substr(at, end - at)) + "'";
  }

  status error_at(std::size_t at, std::string_view what) const {
    return status(errc::invalid_argument,
                  "faults spec: column " + std::to_string(at + 1) + ": " + std::string(what));
  }
  status fail_at(std::size_t at, std::string_view expected) const {
    return error_at(at, std::string(expected) + ", found " + found(at));
  }
  status fail_here(std::string_view expected) const { return fail_at(pos_, expected); }

  // A run of characters satisfying `pred`, starting at pos_ (which is advanced past it).
  template <class Pred>
  std::string_view take_while(Pred pred) {
    std::size_t start = pos_;
    while (!at_end() && pred(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  core::result<item> parse_item(const spec& so_far) {
    item it;
    const std::size_t name_col = pos_;
    std::string_view name = take_while(detail::is_point_name_char);
    if (name.empty()) return fail_here("expected a point name");
    it.point = std::string(name);
    if (peek() == '*') {
      ++pos_;
      it.point += '*';
      if (!at_end() && (detail::is_point_name_char(peek()) || peek() == '*')) {
        return fail_here("a wildcard '*' must end the point name");
      }
    }
    if (peek() == '@' && text_.substr(pos_ + 1).starts_with(faults::rank_filter_prefix)) {
      // @rank=N (nccl/): the '=' is the filter's own.
      pos_ += 1 + faults::rank_filter_prefix.size();
      std::string_view digits = take_while([](char c) { return c >= '0' && c <= '9'; });
      if (digits.empty() || digits.size() > 9) return fail_here("expected a rank number after '@rank='");
      it.filter = std::string(faults::rank_filter_prefix) + std::string(digits);
    } else if (peek() == '@') {
      ++pos_;
      std::string_view filter = take_while(
          [](char c) { return detail::is_point_name_char(c) && c != '/'; });
      if (filter.empty()) return fail_here("expected a program name after '@'");
      it.filter = std::string(filter);
      if (peek() == '*') {
        ++pos_;
        it.filter += '*';
      }
    }
    if (auto s = check_point(it, name_col, so_far); !s) return s;

    skip_space();
    if (peek() != '=') return fail_here("expected '=' after point name '" + it.written() + "'");
    ++pos_;
    for (;;) {
      skip_space();
      auto t = parse_term();
      if (!t) return t.error();
      it.terms.push_back(std::move(*t));
      skip_space();
      if (!at_arrow()) break;
      pos_ += 2;
    }
    columns_.push_back(name_col);
    return it;
  }

  status check_point(const item& it, std::size_t col, const spec& so_far) const {
    std::string_view prefix = it.prefix();
    if (it.is_wildcard()) {
      if (std::string_view("bug/").starts_with(prefix) || prefix.starts_with("bug/")) {
        return error_at(col, "wildcard '" + it.point +
                                 "' covers bug points; name each bug point exactly");
      }
    } else if (prefix.starts_with("bug/") && find_bug_point(prefix) == nullptr) {
      return error_at(col, "unknown bug point '" + it.point + "' (the known ones are listed in faults/bug_points.h)");
    }
    for (std::size_t i = 0; i < so_far.items.size(); ++i) {
      if (so_far.items[i].written() == it.written()) {
        return error_at(col, "point '" + it.written() + "' is named twice (first at column " +
                                 std::to_string(columns_[i] + 1) + ")");
      }
    }
    return status::ok();
  }

  core::result<term> parse_term() {
    term t;
    if (is_digit(peek()) || peek() == '.') {
      const std::size_t num_col = pos_;
      std::string_view number = take_while([](char c) { return is_digit(c) || c == '.'; });
      skip_space();
      if (peek() == '%') {
        auto p = to_ppb(number, num_col);
        if (!p) return p.error();
        t.probability_ppb = *p;
        ++pos_;
        skip_space();
        if (is_digit(peek()) || peek() == '.') {
          const std::size_t count_col = pos_;
          number = take_while([](char c) { return is_digit(c) || c == '.'; });
          skip_space();
          if (peek() != '*') return fail_here("expected '*' after the count '" + std::string(number) + "'");
          auto n = to_count(number, count_col);
          if (!n) return n.error();
          t.count = *n;
          ++pos_;
        }
      } else if (peek() == '*') {
        auto n = to_count(number, num_col);
        if (!n) return n.error();
        t.count = *n;
        ++pos_;
      } else {
        return fail_here("expected '%' or '*' after the number '" + std::string(number) + "'");
      }
      skip_space();
    }

    const std::size_t action_col = pos_;
    std::string_view word = take_while(is_alpha);
    const action_description* described = find_action(word);
    if (described == nullptr || is_word_char(peek())) return fail_at(action_col, expected_action());
    t.action.kind = described->kind;

    skip_space();
    const bool has_args = peek() == '(';
    switch (described->args) {
      case action_args::none:
        if (has_args) return fail_here("'" + std::string(word) + "' takes no arguments");
        return t;
      case action_args::optional_code:
        if (!has_args) return t;  // fail alone: code 1
        break;
      case action_args::duration:
        if (!has_args) return fail_here("expected '(' after 'delay' (usage: delay(50ms))");
        break;
      case action_args::rendezvous:
        if (!has_args) return fail_here("expected '(' after 'pause' (usage: pause(name) or pause(name, 5s))");
        break;
      case action_args::device:
        if (!has_args) return fail_here("expected '(' after 'teardown' (usage: teardown(0))");
        break;
    }
    ++pos_;  // '('
    skip_space();
    if (auto s = parse_args(t.action); !s) return s;
    skip_space();
    if (peek() != ')') return fail_here("expected ')' to close '" + std::string(word) + "('");
    ++pos_;
    return t;
  }

  status parse_args(action& a) {
    switch (a.kind) {
      case action_kind::fail: {
        const std::size_t col = pos_;
        std::string_view arg = take_while(is_word_char);
        constexpr std::string_view expected =
            "expected an errno name (ENOMEM, EIO, ...), a CUDA driver error name (CUDA_ERROR_INVALID_VALUE, ...), "
            "an ncclResult_t name (ncclSystemError, ...) or a positive integer";
        if (arg.empty()) return fail_at(col, expected);
        if (is_digit(arg.front())) {
          std::uint64_t v = 0;
          if (!parse_u64(arg, v) || v == 0 || v > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
            return fail_at(col, "a failure code must be a positive integer or an errno name");
          }
          a.code = static_cast<int>(v);
          return status::ok();
        }
        if (auto code = errno_from_name(arg)) {
          a.code = *code;
          return status::ok();
        }
        if (int cuda = cuda_error_from_name(arg.data(), arg.size()); cuda != 0) {
          a.code = cuda;
          return status::ok();
        }
        if (int nccl = nccl_result_value(arg); nccl > 0) {  // nccl/ points: an ncclResult_t name
          a.code = nccl;
          return status::ok();
        }
        return fail_at(col, expected);
      }
      case action_kind::delay: {
        auto d = parse_duration();
        if (!d) return d.error();
        a.duration = *d;
        return status::ok();
      }
      case action_kind::pause: {
        const std::size_t col = pos_;
        std::string_view name = take_while(is_rendezvous_char);
        if (name.empty()) return fail_at(col, "expected a rendezvous name (letters, digits, '_', '.', '-')");
        if (name.size() > max_rendezvous_name_size) {
          return error_at(col, "a rendezvous name has at most " + std::to_string(max_rendezvous_name_size) +
                                   " characters, found one of " + std::to_string(name.size()));
        }
        a.rendezvous = std::string(name);
        skip_space();
        if (peek() == ',') {
          ++pos_;
          skip_space();
          const std::size_t timeout_col = pos_;
          auto d = parse_duration();
          if (!d) return d.error();
          if (d->count() == 0) return fail_at(timeout_col, "a pause timeout must be positive");
          a.timeout = *d;
        }
        return status::ok();
      }
      case action_kind::teardown: {
        const std::size_t col = pos_;
        std::string_view arg = take_while(is_word_char);
        if (arg == "device") {
          a.device = current_device;
          return status::ok();
        }
        std::uint64_t v = 0;
        if (!parse_u64(arg, v) || v >= max_device) {
          return fail_at(col, "expected a device number, or 'device' (the calling thread's current device)");
        }
        a.device = static_cast<int>(v);
        return status::ok();
      }
      default:
        return status::ok();
    }
  }

  core::result<std::chrono::nanoseconds> parse_duration() {
    const std::size_t col = pos_;
    std::string_view token = take_while(is_word_char);
    constexpr std::string_view expected = "expected a duration like 50ms (a whole number with unit ns, us, ms or s)";
    std::size_t digits = 0;
    while (digits < token.size() && is_digit(token[digits])) ++digits;
    std::string_view unit = token.substr(digits);
    std::uint64_t scale = 0;
    if (unit == "ns") scale = 1;
    else if (unit == "us") scale = 1'000;
    else if (unit == "ms") scale = 1'000'000;
    else if (unit == "s") scale = 1'000'000'000;
    std::uint64_t v = 0;
    if (scale == 0 || !parse_u64(token.substr(0, digits), v)) return fail_at(col, expected);
    constexpr auto max_ns = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (v > max_ns / scale) return fail_at(col, "a duration must be below 292 years");
    return std::chrono::nanoseconds(static_cast<std::int64_t>(v * scale));
  }

  core::result<std::uint32_t> to_ppb(std::string_view number, std::size_t col) const {
    const std::string shown = "'" + std::string(number) + "%'";
    std::size_t dot = number.find('.');
    std::string_view whole = number.substr(0, dot);
    std::string_view frac = dot == std::string_view::npos ? std::string_view() : number.substr(dot + 1);
    std::uint64_t w = 0;
    std::uint64_t f = 0;
    if (!parse_u64(whole, w) || (dot != std::string_view::npos && !parse_u64(frac, f))) {
      return error_at(col, "expected a percentage like 5% or 0.5%, found " + shown);
    }
    if (frac.size() > max_percent_decimals) {
      return error_at(col, "a probability has at most " + std::to_string(max_percent_decimals) +
                               " decimal places, found " + shown);
    }
    for (std::size_t i = frac.size(); i < max_percent_decimals; ++i) f *= 10;
    if (w > 100 || (w == 100 && f > 0)) return error_at(col, "a probability must be at most 100%, found " + shown);
    return static_cast<std::uint32_t>(w * ppb_per_percent + f);
  }

  core::result<std::uint64_t> to_count(std::string_view number, std::size_t col) const {
    std::uint64_t v = 0;
    if (!parse_u64(number, v) || v == 0) {
      return error_at(col, "a count must be a positive integer, found '" + std::string(number) + "'");
    }
    return v;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::vector<std::size_t> columns_;  // where each accepted item's name starts
};

std::string format_duration(std::chrono::nanoseconds d) {
  auto ns = d.count();
  if (ns != 0 && ns % 1'000'000'000 == 0) return std::to_string(ns / 1'000'000'000) + "s";
  if (ns != 0 && ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + "ms";
  if (ns != 0 && ns % 1'000 == 0) return std::to_string(ns / 1'000) + "us";
  return std::to_string(ns) + "ns";
}

std::string format_percent(std::uint32_t ppb) {
  std::string out = std::to_string(ppb / ppb_per_percent);
  std::uint32_t frac = ppb % ppb_per_percent;
  if (frac != 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, static_cast<std::size_t>(max_percent_decimals) - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out + "%";
}

}  // namespace

std::string_view to_string(action_kind kind) noexcept {
  for (const auto& a : action_table) {
    if (a.kind == kind) return a.name;
  }
  return "unknown";
}

core::result<spec> parse(std::string_view text) { return parser(text).run(); }

namespace {

// fail's code as the point's family names them: an ncclResult_t name on nccl/ points, the number
// on cuda/ points (CUDA's numbers are not errno's), else an errno name.
std::string code_text(int code, const item* owner) {
  if (owner != nullptr && pattern_reaches(owner->point, injector::nccl)) {
    for (const auto& r : nccl_results) {
      if (r.value == code) return std::string(r.name);
    }
    return std::to_string(code);
  }
  if (owner != nullptr && pattern_reaches(owner->point, injector::cuda)) return std::to_string(code);
  const std::string_view name = errno_name(code);
  return name.empty() ? std::to_string(code) : std::string(name);
}

std::string format_term(const term& t, const item* owner) {
  std::string out;
  if (t.probability_ppb) out += format_percent(*t.probability_ppb);
  if (t.count) out += std::to_string(*t.count) + "*";
  out += to_string(t.action.kind);
  const action& a = t.action;
  switch (a.kind) {
    case action_kind::fail:
      if (a.code != 1) out += "(" + code_text(a.code, owner) + ")";
      break;
    case action_kind::delay: out += "(" + format_duration(a.duration) + ")"; break;
    case action_kind::pause:
      out += "(" + a.rendezvous;
      if (a.timeout != default_pause_timeout) out += ", " + format_duration(a.timeout);
      out += ")";
      break;
    case action_kind::teardown:
      out += "(" + (a.device == current_device ? std::string("device") : std::to_string(a.device)) + ")";
      break;
    default: break;
  }
  return out;
}

}  // namespace

std::string format(const term& t) { return format_term(t, nullptr); }

std::string format(const item& i) {
  std::string out = i.written() + "=";
  for (std::size_t k = 0; k < i.terms.size(); ++k) {
    if (k > 0) out += "->";
    out += format_term(i.terms[k], &i);
  }
  return out;
}

std::string format(const spec& s) {
  std::string out;
  for (std::size_t k = 0; k < s.items.size(); ++k) {
    if (k > 0) out += ";";
    out += format(s.items[k]);
  }
  return out;
}

namespace {
// errno values are small on Linux; glibc names each one (strerrorname_np, glibc >= 2.32).
constexpr int max_errno = 200;

// Names glibc does not return because they alias another value's canonical name.
constexpr std::array<std::pair<std::string_view, int>, 3> errno_aliases{{
    {"EWOULDBLOCK", EWOULDBLOCK},
    {"EDEADLOCK", EDEADLOCK},
    {"ENOTSUP", ENOTSUP},
}};
}  // namespace

std::optional<int> errno_from_name(std::string_view name) noexcept {
  for (auto [n, v] : errno_aliases) {
    if (n == name) return v;
  }
  for (int code = 1; code < max_errno; ++code) {
    if (errno_name(code) == name) return code;
  }
  return std::nullopt;
}

std::string_view errno_name(int code) noexcept {
  if (code <= 0 || code >= max_errno) return {};
  const char* n = strerrorname_np(code);
  return n != nullptr ? std::string_view(n) : std::string_view();
}

}  // namespace faultline::faults
