// Small system helpers shared by the harness: pidfd system calls and the executable's directory,
// plus core/file_io.h's helpers (errno to status, EINTR-safe I/O, whole-file reads, timestamps and
// shell quoting) under the names the harness calls them by. Private to faultline::harness.
#pragma once

#include <sys/types.h>

#include <filesystem>

#include "core/file_io.h"
#include "core/status.h"

namespace faultline::harness::detail {

// errno to status, writes, whole-file reads, timestamps and shell quoting live in core/file_io.h
// (reports/ uses them too); the harness keeps calling them detail::read_file and so on.
using core::io::iso_utc;
using core::io::read_file;
using core::io::shell_join;
using core::io::shell_quote;
using core::io::sys_error;
using core::io::write_all;

/// pidfd_open(2) and pidfd_send_signal(2) through syscall(2) (glibc 2.36's <sys/pidfd.h> lacks
/// C linkage in C++). Return -1 with errno set on failure, like the system calls.
int pidfd_open(pid_t pid);
int pidfd_send_signal(int pidfd, int sig);

/// The directory holding the running executable (from /proc/self/exe); empty on failure.
std::filesystem::path self_dir();

}  // namespace faultline::harness::detail
