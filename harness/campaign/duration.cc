#include "harness/campaign/duration.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <string>

namespace faultline::harness {

core::result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return core::status(core::errc::invalid_argument,
                        "invalid duration '" + std::string(text) + "': " + std::string(why) +
                            " (expected e.g. 500ms, 10s, 2m, 1h)");
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (!text.empty() && text[0] == '-') return bad("negative");
  if (i == 0) return bad("not a number");
  std::string number(text.substr(0, i));
  std::string_view unit = text.substr(i);
  if (unit.empty()) return bad("missing unit");
  if (number.find('.') != number.rfind('.') || number == ".") return bad("not a number");
  double value = std::strtod(number.c_str(), nullptr);
  double scale_ms = 0;
  if (unit == "ms") scale_ms = 1;
  else if (unit == "s") scale_ms = 1e3;
  else if (unit == "m") scale_ms = 60e3;
  else if (unit == "h") scale_ms = 3600e3;
  else return bad("unknown unit '" + std::string(unit) + "'");
  double ms = std::round(value * scale_ms);
  if (ms > 365.0 * 24 * 3600e3) return bad("longer than a year");
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

std::string format_duration(std::chrono::milliseconds d) {
  long long ms = d.count();
  char buf[64];
  if (ms < 1000) {
    std::snprintf(buf, sizeof buf, "%lldms", ms);
  } else if (ms < 60'000) {
    if (ms % 1000 == 0) std::snprintf(buf, sizeof buf, "%llds", ms / 1000);
    else if (ms % 100 == 0) std::snprintf(buf, sizeof buf, "%lld.%llds", ms / 1000, (ms % 1000) / 100);
    else std::snprintf(buf, sizeof buf, "%lldms", ms);
  } else {
    long long s = ms / 1000;
    long long h = s / 3600, m = (s % 3600) / 60, sec = s % 60;
    std::string out;
    if (h) out += std::to_string(h) + "h";
    if (m) out += std::to_string(m) + "m";
    if (sec) out += std::to_string(sec) + "s";
    if (ms % 1000) return std::to_string(ms) + "ms";  // keep it exact rather than pretty
    return out;
  }
  return buf;
}

}  // namespace faultline::harness
