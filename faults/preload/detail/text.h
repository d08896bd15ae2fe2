// Async-signal-safe text output for the agent's files: a small buffered writer over a file
// descriptor that formats numbers itself (no stdio, no locale, no allocation), and the formatter
// of the protocol's frame lines. Private to the agent.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <unistd.h>

#include "faults/preload/detail/sys.h"
namespace faultline::agent::detail {

/// Writes all of [data, data + n) to `fd`, retrying short writes and EINTR. Returns false on any
/// other error. Async-signal-safe.
inline bool write_all(int fd, const char* data, std::size_t n) noexcept {
  while (n > 0) {
    ssize_t done = sys::write(fd, data, n);
    if (done < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += done;
    n -= static_cast<std::size_t>(done);
  }
  return true;
}

/// A buffered writer over a file descriptor, for use in signal handlers: it lives on the stack,
/// flushes when its buffer is full and writes pieces larger than the buffer straight through.
/// A line that fits the buffer reaches the file in one write(2) unless the buffer was flushed
/// mid-line. Errors are remembered (ok()), not reported per call. Async-signal-safe; one writer
/// per thread. The destructor flushes.
class fd_writer {
 public:
  explicit fd_writer(int fd) noexcept : fd_(fd) {}
  fd_writer(const fd_writer&) = delete;
  fd_writer& operator=(const fd_writer&) = delete;
  ~fd_writer() { flush(); }

  fd_writer& str(const char* s, std::size_t n) noexcept {
    if (size_ + n > sizeof(buffer_)) flush();
    if (n > sizeof(buffer_)) {
      ok_ = write_all(fd_, s, n) && ok_;
      return *this;
    }
    std::memcpy(buffer_ + size_, s, n);
    size_ += n;
    return *this;
  }
  fd_writer& str(const char* s) noexcept { return s ? str(s, std::strlen(s)) : *this; }
  fd_writer& chr(char c) noexcept { return str(&c, 1); }

  /// Decimal, with a '-' for negative values.
  fd_writer& dec(std::int64_t v) noexcept {
    char digits[24];
    std::size_t n = 0;
    std::uint64_t u = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
    do {
      digits[sizeof(digits) - 1 - n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (v < 0) digits[sizeof(digits) - 1 - n++] = '-';
    return str(digits + sizeof(digits) - n, n);
  }

  /// "0x" and lowercase hex digits, no leading zeros ("0x0" for zero).
  fd_writer& hex(std::uint64_t v) noexcept {
    char digits[18];
    std::size_t n = 0;
    do {
      digits[sizeof(digits) - 1 - n++] = "0123456789abcdef"[v & 0xf];
      v >>= 4;
    } while (v != 0);
    digits[sizeof(digits) - 1 - n++] = 'x';
    digits[sizeof(digits) - 1 - n++] = '0';
    return str(digits + sizeof(digits) - n, n);
  }

  /// Writes out what is buffered.
  void flush() noexcept {
    if (size_ > 0) ok_ = write_all(fd_, buffer_, size_) && ok_;
    size_ = 0;
  }

  /// False once any write failed.
  [[nodiscard]] bool ok() const noexcept { return ok_; }

 private:
  int fd_;
  std::size_t size_ = 0;
  bool ok_ = true;
  char buffer_[2048];
};

/// One resolved frame, as the protocol prints it.
struct frame_text {
  std::uintptr_t address = 0;
  const char* module = nullptr;    ///< absolute path, or null when no module holds the address
  std::uintptr_t offset = 0;       ///< address minus the module's load bias
  const char* symbol = nullptr;    ///< raw (possibly mangled) symbol name, or null
};

/// Demangles `mangled` by calling `sink(piece, size, opaque)` for each piece of the demangled
/// name, without allocating; returns false when the name is not a valid mangled name (the name
/// is parsed completely before any piece is handed out, so then nothing was written).
using demangle_fn = bool (*)(const char* mangled, void (*sink)(const char*, std::size_t, void*),
                             void* opaque) noexcept;

/// Writes "#K ADDR MODULE+OFFSET FUNCTION\n". FUNCTION is the demangled symbol when `demangle`
/// is given, the symbol is a C++ mangled name ("_Z...") no longer than `max_demangle_chars`, and
/// demangling succeeds; otherwise the raw symbol; "??" without a symbol. Async-signal-safe when
/// `demangle` is.
inline void write_frame_line(fd_writer& out, int index, const frame_text& frame,
                             demangle_fn demangle, std::size_t max_demangle_chars) noexcept {
  out.chr('#').dec(index).chr(' ').hex(frame.address).chr(' ');
  if (frame.module != nullptr && frame.module[0] != '\0') {
    out.str(frame.module).chr('+').hex(frame.offset);
  } else {
    out.str("??+").hex(frame.address);
  }
  out.chr(' ');
  const char* symbol = frame.symbol;
  if (symbol == nullptr || symbol[0] == '\0') {
    out.str("??\n");
    return;
  }
  bool demangled = false;
  if (demangle != nullptr && symbol[0] == '_' && symbol[1] == 'Z' &&
      ::strnlen(symbol, max_demangle_chars + 1) <= max_demangle_chars) {
    demangled = demangle(
        symbol,
        [](const char* piece, std::size_t n, void* opaque) {
          static_cast<fd_writer*>(opaque)->str(piece, n);
        },
        &out);
  }
  if (!demangled) out.str(symbol);
  out.chr('\n');
}

/// A fixed-capacity string built by appends, for file paths in signal handlers. Appends past
/// the capacity are dropped and remembered (overflowed()); the text stays null-terminated.
/// Async-signal-safe.
template <std::size_t capacity>
class fixed_string {
 public:
  fixed_string() noexcept { text_[0] = '\0'; }

  fixed_string& str(const char* s) noexcept {
    std::size_t n = s ? std::strlen(s) : 0;
    if (size_ + n >= capacity) {
      overflowed_ = true;
      return *this;
    }
    std::memcpy(text_ + size_, s, n);
    size_ += n;
    text_[size_] = '\0';
    return *this;
  }
  fixed_string& dec(std::uint64_t v) noexcept {
    char digits[24];
    std::size_t n = 0;
    do {
      digits[sizeof(digits) - 2 - n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    digits[sizeof(digits) - 1] = '\0';
    return str(digits + sizeof(digits) - 1 - n);
  }

  [[nodiscard]] const char* c_str() const noexcept { return text_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool overflowed() const noexcept { return overflowed_; }

 private:
  char text_[capacity];
  std::size_t size_ = 0;
  bool overflowed_ = false;
};

}  // namespace faultline::agent::detail
