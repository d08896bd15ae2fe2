// Packing a large text into a page: gzip, then base64, so that the HTML report can carry
// plotly.js in about a third of its size and unpack it in the browser (DecompressionStream).
// Private to faultline::reports.
//
//   std::string packed = detail::base64(detail::gzip(plotly_js));
#pragma once

#include <string>
#include <string_view>

namespace faultline::reports::detail {

/// `data` compressed as one gzip member (RFC 1952) at zlib's best compression. zlib failing
/// here (out of memory) is a broken invariant: it aborts with a message.
std::string gzip(std::string_view data);

/// `data` in base64 (RFC 4648, with padding, no line breaks).
std::string base64(std::string_view data);

}  // namespace faultline::reports::detail
