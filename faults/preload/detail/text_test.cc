// Tests of the agent's signal-safe text output: number formatting, buffering across the writer's
// capacity, and the protocol's frame line with and without a module, a symbol and a demangler.
// Output goes through a pipe and is read back, as the runner would read the files.
#include "faults/preload/detail/text.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>

namespace faultline::agent::detail {
namespace {

// Collects what a writer wrote to a pipe (small outputs only: the pipe holds 64 KiB).
class pipe_capture {
 public:
  pipe_capture() { EXPECT_EQ(::pipe2(fds_, O_CLOEXEC), 0); }
  ~pipe_capture() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    if (fds_[1] >= 0) ::close(fds_[1]);
  }
  [[nodiscard]] int fd() const { return fds_[1]; }
  std::string take() {
    ::close(fds_[1]);
    fds_[1] = -1;
    std::string text;
    char chunk[4096];
    for (ssize_t n; (n = ::read(fds_[0], chunk, sizeof(chunk))) > 0;) text.append(chunk, n);
    return text;
  }

 private:
  int fds_[2] = {-1, -1};
};

template <typename Fn>
std::string written(Fn&& fn) {
  pipe_capture capture;
  {
    fd_writer out(capture.fd());
    fn(out);
  }
  return capture.take();
}

TEST(fd_writer, formats_decimal_including_extremes) {
  EXPECT_EQ(written([](fd_writer& o) { o.dec(0); }), "0");
  EXPECT_EQ(written([](fd_writer& o) { o.dec(-42); }), "-42");
  EXPECT_EQ(written([](fd_writer& o) { o.dec(std::numeric_limits<std::int64_t>::min()); }),
            "-9223372036854775808");
  EXPECT_EQ(written([](fd_writer& o) { o.dec(std::numeric_limits<std::int64_t>::max()); }),
            "9223372036854775807");
}

TEST(fd_writer, formats_lowercase_hex_with_prefix) {
  EXPECT_EQ(written([](fd_writer& o) { o.hex(0); }), "0x0");
  EXPECT_EQ(written([](fd_writer& o) { o.hex(0xdeadBEEFu); }), "0xdeadbeef");
  EXPECT_EQ(written([](fd_writer& o) { o.hex(std::numeric_limits<std::uint64_t>::max()); }),
            "0xffffffffffffffff");
}

TEST(fd_writer, keeps_order_across_flushes_and_oversized_pieces) {
  std::string big(5000, 'b');
  std::string small(1500, 's');
  std::string text = written([&](fd_writer& o) {
    o.str(small.c_str()).str(small.c_str()).str(big.c_str()).chr('!').str(nullptr);
  });
  EXPECT_EQ(text, small + small + big + "!");
}

TEST(fd_writer, remembers_a_failed_write) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::close(fds[0]);
  // Ignored only for this test: an ignored SIGPIPE would be inherited by the children that the
  // agent tests spawn.
  auto previous = ::signal(SIGPIPE, SIG_IGN);
  fd_writer out(fds[1]);
  out.str("lost");
  out.flush();
  EXPECT_FALSE(out.ok());
  ::close(fds[1]);
  ::signal(SIGPIPE, previous);
}

// A stand-in demangler: "demangles" _Z1fv to "f()" and rejects everything else.
bool fake_demangle(const char* mangled, void (*sink)(const char*, std::size_t, void*),
                   void* opaque) noexcept {
  if (std::string(mangled) != "_Z1fv") return false;
  sink("f", 1, opaque);
  sink("()", 2, opaque);
  return true;
}

TEST(write_frame_line, prints_module_offset_and_demangled_symbol) {
  frame_text frame{0x7f0012345678, "/usr/lib/libx.so", 0x5678, "_Z1fv"};
  EXPECT_EQ(written([&](fd_writer& o) { write_frame_line(o, 3, frame, &fake_demangle, 64); }),
            "#3 0x7f0012345678 /usr/lib/libx.so+0x5678 f()\n");
}

TEST(write_frame_line, keeps_the_raw_name_when_it_cannot_demangle) {
  frame_text not_cxx{0x10, "/m", 0x10, "main"};
  EXPECT_EQ(written([&](fd_writer& o) { write_frame_line(o, 0, not_cxx, &fake_demangle, 64); }),
            "#0 0x10 /m+0x10 main\n");
  frame_text invalid{0x10, "/m", 0x10, "_Zbroken"};
  EXPECT_EQ(written([&](fd_writer& o) { write_frame_line(o, 0, invalid, &fake_demangle, 64); }),
            "#0 0x10 /m+0x10 _Zbroken\n");
  frame_text valid{0x10, "/m", 0x10, "_Z1fv"};
  EXPECT_EQ(written([&](fd_writer& o) { write_frame_line(o, 0, valid, nullptr, 64); }),
            "#0 0x10 /m+0x10 _Z1fv\n");
  // Longer than the limit: not handed to the demangler at all.
  EXPECT_EQ(written([&](fd_writer& o) { write_frame_line(o, 0, valid, &fake_demangle, 4); }),
            "#0 0x10 /m+0x10 _Z1fv\n");
}

TEST(write_frame_line, marks_unknown_module_and_symbol) {
  frame_text frame{0xabc, nullptr, 0, nullptr};
  EXPECT_EQ(written([&](fd_writer& o) { write_frame_line(o, 1, frame, &fake_demangle, 64); }),
            "#1 0xabc ??+0xabc ??\n");
  frame_text empty_module{0xabc, "", 0, ""};
  EXPECT_EQ(written([&](fd_writer& o) { write_frame_line(o, 1, empty_module, nullptr, 64); }),
            "#1 0xabc ??+0xabc ??\n");
}

TEST(fixed_string, builds_paths_and_flags_overflow) {
  fixed_string<32> path;
  path.str("/run/").str("crash.").dec(12345);
  EXPECT_STREQ(path.c_str(), "/run/crash.12345");
  EXPECT_EQ(path.size(), 16u);
  EXPECT_FALSE(path.overflowed());

  fixed_string<8> tiny;
  tiny.str("1234567").str("8");
  EXPECT_TRUE(tiny.overflowed());
  EXPECT_STREQ(tiny.c_str(), "1234567");
  fixed_string<8> zero;
  zero.dec(0);
  EXPECT_STREQ(zero.c_str(), "0");
}

}  // namespace
}  // namespace faultline::agent::detail
