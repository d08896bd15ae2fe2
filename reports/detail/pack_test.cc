// Packing: what gzip() writes, zlib's own inflate (gzip mode) gives back byte for byte, and it is
// much smaller for text like plotly.js; base64() matches RFC 4648's test vectors.
#include "reports/detail/pack.h"

#include <gtest/gtest.h>
#include <zlib.h>

namespace faultline::reports::detail {
namespace {

std::string gunzip(const std::string& packed) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);  // gzip only: a zlib stream would be refused
  std::string out;
  char buf[1 << 14];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
  z.avail_in = static_cast<uInt>(packed.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END);
  inflateEnd(&z);
  return out;
}

TEST(gzip, round_trips_through_zlib_in_gzip_mode) {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "function f" + std::to_string(i % 97) + "(a,b){return a+b}\n";
  text += std::string("\0\xff binary\0", 10);
  const std::string packed = gzip(text);
  ASSERT_GE(packed.size(), 10u);
  EXPECT_EQ(static_cast<unsigned char>(packed[0]), 0x1f);  // the gzip magic
  EXPECT_EQ(static_cast<unsigned char>(packed[1]), 0x8b);
  EXPECT_LT(packed.size() * 10, text.size());
  EXPECT_EQ(gunzip(packed), text);
  EXPECT_EQ(gunzip(gzip("")), "");
}

TEST(base64, matches_the_rfc_vectors) {
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foob"), "Zm9vYg==");
  EXPECT_EQ(base64("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64(std::string("\xfb\xff\x00", 3)), "+/8A");
}

}  // namespace
}  // namespace faultline::reports::detail
