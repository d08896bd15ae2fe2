// Text helpers shared by the report writers: making arbitrary recorded text (crash signatures,
// fault specs, command lines: whatever a program under test printed) safe to put into XML, HTML,
// Markdown and JSON, and the few number formats every report uses. Private to faultline::reports.
//
//   detail::printable("a\x01b\xff")   // "a\\x01b\\xff": valid UTF-8, no control characters
//   detail::percent(0.0312)           // "3.1%"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "harness/results/results.h"

namespace faultline::reports::detail {

/// `text` as valid UTF-8 with no control characters but tab, line feed and carriage return, and
/// only characters that XML 1.0 allows: other C0 controls and DEL become "\xNN", bytes that are
/// not UTF-8 (malformed, overlong, surrogates) become "\xNN" one per byte, C1 controls and the
/// non-characters U+FFFE, U+FFFF become "\u{85}", "\u{FFFE}". Text that needs none of this comes
/// back unchanged, so the escapes are visible and nothing is silently lost.
std::string printable(std::string_view text);

/// printable(), then every line break (CR, LF, CRLF) and tab turned into one space: for a value
/// that must stay on one line (a table cell, an attribute shown as a title).
std::string one_line(std::string_view text);

/// "3.1%", "0.05%", "100%": a rate in [0, 1] as a percentage with enough digits to tell small
/// rates apart (at least two significant digits below 1%).
std::string percent(double rate);

/// "p = 0.0012", "p < 1e-12": a p-value in a short form.
std::string p_value(double p);

/// "0.05", "1e-06", "0.333333": a number in printf's %g form (six significant digits).
std::string number(double v);

/// "crash/exit", "hang": an outcome, and the phase it happened in when there is one.
std::string outcome_and_phase(harness::outcome o, harness::phase p);

/// 12345 -> "12,345".
std::string thousands(std::uint64_t n);

/// "1 run", "12,345 runs": a count and its noun, singular only for one (`many` defaults to
/// `one` + "s"), so that no count reads "1 variants".
std::string counted(std::uint64_t n, std::string_view one, std::string_view many = {});

/// Milliseconds since the epoch of an ISO 8601 UTC timestamp as the harness writes them
/// ("2024-11-21T19:30:00.123Z"; the fraction and the Z are optional). -1 when it does not parse.
std::int64_t parse_iso_utc_ms(std::string_view text);

/// "2024-11-21T19:30:00.123Z" for milliseconds since the epoch.
std::string iso_utc_ms(std::int64_t ms);

}  // namespace faultline::reports::detail
