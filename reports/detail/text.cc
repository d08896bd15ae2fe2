#include "reports/detail/text.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace faultline::reports::detail {
namespace {

void hex_byte(std::string& out, unsigned char b) {
  static constexpr char digits[] = "0123456789abcdef";
  out += "\\x";
  out += digits[b >> 4];
  out += digits[b & 0xf];
}

void code_point_escape(std::string& out, std::uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u{%X}", static_cast<unsigned>(cp));
  out += buf;
}

bool continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      if ((b < 0x20 && b != '\t' && b != '\n' && b != '\r') || b == 0x7F) hex_byte(out, b);
      else out += static_cast<char>(b);
      ++i;
      continue;
    }
    // The length of the sequence and the range its second byte must lie in (RFC 3629 table:
    // this rules out overlong forms, surrogates and code points past U+10FFFF).
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b == 0xE0) len = 3, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC) len = 3;
    else if (b == 0xED) len = 3, hi = 0x9F;
    else if (b >= 0xEE && b <= 0xEF) len = 3;
    else if (b == 0xF0) len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) len = 4;
    else if (b == 0xF4) len = 4, hi = 0x8F;
    bool ok = len != 0 && i + len <= text.size();
    if (ok) {
      const auto second = static_cast<unsigned char>(text[i + 1]);
      ok = second >= lo && second <= hi;
      for (std::size_t k = 2; ok && k < len; ++k) ok = continuation(static_cast<unsigned char>(text[i + k]));
    }
    if (!ok) {
      hex_byte(out, b);
      ++i;
      continue;
    }
    std::uint32_t cp = b & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    if ((cp >= 0x80 && cp <= 0x9F) || cp == 0xFFFE || cp == 0xFFFF) code_point_escape(out, cp);
    else out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

std::string one_line(std::string_view text) {
  std::string p = printable(text);
  std::string out;
  out.reserve(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\r' && i + 1 < p.size() && p[i + 1] == '\n') continue;  // CRLF: one space, from the LF
    out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  }
  return out;
}

std::string percent(double rate) {
  if (!(rate >= 0)) rate = 0;
  const double v = rate * 100.0;
  if (v == 0.0) return "0%";
  if (v >= 100.0) return "100%";
  // Never round a rate to 0% or 100% that is not exactly that.
  if (v > 99.99) return ">99.99%";
  char buf[32];
  if (v >= 99.95) std::snprintf(buf, sizeof buf, "%.2f%%", v);
  else if (v >= 1.0) std::snprintf(buf, sizeof buf, "%.1f%%", v);
  else if (v >= 0.1) std::snprintf(buf, sizeof buf, "%.2f%%", v);
  else std::snprintf(buf, sizeof buf, "%.2g%%", v);
  return buf;
}

std::string p_value(double p) {
  char buf[32];
  if (p < 1e-12) return "p < 1e-12";
  if (p < 0.001) std::snprintf(buf, sizeof buf, "p = %.2g", p);
  else std::snprintf(buf, sizeof buf, "p = %.4f", p);
  return buf;
}

std::string counted(std::uint64_t n, std::string_view one, std::string_view many) {
  std::string noun(n == 1 ? one : many.empty() ? one : many);
  if (n != 1 && many.empty()) noun += 's';
  return thousands(n) + " " + noun;
}

std::string thousands(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::int64_t parse_iso_utc_ms(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS[.fff...][Z]
  auto num = [&](std::size_t at, std::size_t n, int& v) {
    if (at + n > text.size()) return false;
    v = 0;
    for (std::size_t k = 0; k < n; ++k) {
      char c = text[at + k];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    return true;
  };
  int year, mon, day, hour, min, sec;
  if (!num(0, 4, year) || text.size() < 19 || text[4] != '-' || !num(5, 2, mon) || text[7] != '-' || !num(8, 2, day) ||
      (text[10] != 'T' && text[10] != ' ') || !num(11, 2, hour) || text[13] != ':' || !num(14, 2, min) ||
      text[16] != ':' || !num(17, 2, sec))
    return -1;
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) return -1;
  std::size_t at = 19;
  int ms = 0;
  if (at < text.size() && text[at] == '.') {
    ++at;
    int digits = 0;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      if (digits < 3) ms = ms * 10 + (text[at] - '0');
      ++digits;
      ++at;
    }
    if (digits == 0) return -1;
    for (int d = digits; d < 3; ++d) ms *= 10;
  }
  if (at < text.size() && text[at] == 'Z') ++at;
  if (at != text.size()) return -1;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  const std::time_t t = ::timegm(&tm);
  if (t < 0) return -1;
  return static_cast<std::int64_t>(t) * 1000 + ms;
}

std::string iso_utc_ms(std::int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string outcome_and_phase(harness::outcome o, harness::phase p) {
  std::string s(harness::to_string(o));
  if (p != harness::phase::none) s += "/" + std::string(harness::to_string(p));
  return s;
}

}  // namespace faultline::reports::detail
