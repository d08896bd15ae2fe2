// File and text helpers for every floor above core: errno to status with a "what" (ENOENT as
// not_found), EINTR-safe writes, whole-file reads, UTC timestamps and POSIX shell quoting. The
// harness (harness/detail/sys.h re-exports them) and reports/ share them from here.
//
//   core::result<std::string> text = core::io::read_file(path, 16 << 20);
//   if (!text) return text.error();   // "open /x/results.jsonl: No such file or directory"
//
// Thread safety: functions of their arguments; no shared state.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace faultline::core::io {

/// errc::io_error "what: strerror(err)" (ENOENT becomes errc::not_found).
status sys_error(int err, std::string_view what);

/// Writes all of `data` to `fd`, retrying EINTR and short writes.
status write_all(int fd, std::string_view data, std::string_view what);

/// Reads a whole file; errors as sys_error. `limit_bytes` caps what is read (0: no cap).
result<std::string> read_file(const std::filesystem::path& path, std::size_t limit_bytes = 0);

/// "2024-11-21T19:30:00.123Z" for a system_clock time.
std::string iso_utc(std::chrono::system_clock::time_point t);

/// Quotes `arg` for a POSIX shell when it needs it ("a b" -> 'a b').
std::string shell_quote(std::string_view arg);
/// Joins argv with spaces, each quoted as needed.
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace faultline::core::io
