#include "reports/detail/pack.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>

namespace faultline::reports::detail {

std::string gzip(std::string_view data) {
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's, which is what the
  // browser's DecompressionStream("gzip") reads.
  if (deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
    std::fputs("faultline: reports: deflateInit2 failed\n", stderr);
    std::abort();
  }
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);  // the bound holds the whole output: one call finishes
  if (rc != Z_STREAM_END) {
    std::fprintf(stderr, "faultline: reports: deflate returned %d\n", rc);
    std::abort();
  }
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string base64(std::string_view data) {
  static constexpr char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    const unsigned v = static_cast<unsigned char>(data[i]) << 16 | static_cast<unsigned char>(data[i + 1]) << 8 |
                       static_cast<unsigned char>(data[i + 2]);
    out += digits[v >> 18];
    out += digits[v >> 12 & 63];
    out += digits[v >> 6 & 63];
    out += digits[v & 63];
  }
  if (const std::size_t rest = data.size() - i) {
    const unsigned v = static_cast<unsigned char>(data[i]) << 16 | (rest == 2 ? static_cast<unsigned char>(data[i + 1]) << 8 : 0u);
    out += digits[v >> 18];
    out += digits[v >> 12 & 63];
    out += rest == 2 ? digits[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace faultline::reports::detail
