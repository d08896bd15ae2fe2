// Small system helpers shared by the harness: errno to status in one place, EINTR-safe I/O,
// whole-file reads, timestamps and shell quoting. Private to faultline::harness.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace faultline::harness::detail {

/// errc::io_error "what: strerror(err)" (ENOENT becomes errc::not_found).
core::status sys_error(int err, std::string_view what);

/// Writes all of `data` to `fd`, retrying EINTR and short writes.
core::status write_all(int fd, std::string_view data, std::string_view what);

/// Reads a whole file; errors as sys_error. `limit_bytes` caps what is read (0: no cap).
core::result<std::string> read_file(const std::filesystem::path& path, std::size_t limit_bytes = 0);

/// "2024-11-21T19:30:00.123Z" for a system_clock time.
std::string iso_utc(std::chrono::system_clock::time_point t);

/// Quotes `arg` for a POSIX shell when it needs it ("a b" -> 'a b').
std::string shell_quote(std::string_view arg);
/// Joins argv with spaces, each quoted as needed.
std::string shell_join(const std::vector<std::string>& argv);

/// pidfd_open(2) and pidfd_send_signal(2) through syscall(2) (glibc 2.36's <sys/pidfd.h> lacks
/// C linkage in C++). Return -1 with errno set on failure, like the system calls.
int pidfd_open(pid_t pid);
int pidfd_send_signal(int pidfd, int sig);

/// The directory holding the running executable (from /proc/self/exe); empty on failure.
std::filesystem::path self_dir();

}  // namespace faultline::harness::detail
