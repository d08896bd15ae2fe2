// faultline's core_pattern pipe handler: every crash's core kept, whatever the crashing process's
// directory holds and however many processes crash at once (README, crash capture).
//
// With core_pattern "core" the kernel writes one file per directory: processes crashing at the
// same moment in one directory overwrite each other's core, and a directory holding a core/
// folder (a source tree) gets none. `faultline cores --install` sets core_pattern to
//
//   |/usr/local/libexec/faultline-core-handler %P %s %c %e core
//
// as systemd-coredump and apport do. The kernel then runs the handler (as root, in the initial
// namespaces) for every crash on the machine, the core on its stdin. A process of a faultline
// run (FAULTLINE_RUN_DIR set, absolute, a directory the process's user owns) gets its core as
// RUN_DIR/core.PID, written as core.PID.part and renamed; any other process gets what the previous
// pattern (the last argument, so the handler keeps no state) would have given it. The handler
// drops to the crashing process's user before it opens any file.
//
//   if (auto s = harness::install_core_handler("/usr/local/libexec/faultline-core-handler"); !s)
//     std::cerr << s.error().message() << "\n";
//   ... runs ...
//   harness::remove_core_handler();  // core_pattern is "core" again
//
// The pure functions (pattern building and parsing, specifier expansion, /proc parsing) are the
// handler's logic and need no privileges; install/remove write /proc/sys/kernel/core_pattern and
// need root in the initial namespaces.
//
// Thread safety: the pure functions are; install/remove/status are not (one machine-wide file).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace faultline::harness {

/// The handler's file name: a pipe pattern running a program of this name is faultline's.
inline constexpr std::string_view core_handler_name = "faultline-core-handler";

/// core_pattern's capacity (CORENAME_MAX_SIZE less the NUL): the kernel cuts a longer text short.
inline constexpr std::size_t core_pattern_max_bytes = 127;

/// The arguments that follow the handler's path in its pattern, before the previous pattern.
inline constexpr std::string_view core_handler_specifiers = "%P %s %c %e";

/// Where the handler puts the core of the process `pid` (its pid in its own pid namespace, as
/// the harness sees it) of a run whose directory is `run_dir`: run_dir/core.PID. While it is
/// being written it is run_dir/core.PID.part.
std::filesystem::path handler_core_path(const std::filesystem::path& run_dir, pid_t pid);

/// The core_pattern that runs `handler` (an absolute path without white space) with
/// `current` (core_pattern's text now) as the previous pattern. When `current` is already a
/// faultline-core-handler pattern, its previous pattern is kept (installing twice changes
/// nothing but the handler's path). Errors (invalid_argument, each naming the problem): the
/// handler path is relative or has white space; `current` is empty, has white space, pipes cores
/// to another program ("core_pattern pipes cores to |/usr/share/apport/apport ..."), sends them
/// to a socket ('@'), or is a faultline pattern whose previous pattern cannot be read; the
/// result would not fit in core_pattern_max_bytes.
core::result<std::string> core_handler_pattern(const std::string& handler, const std::string& current);

/// A faultline-core-handler pattern, taken apart.
struct core_handler_pattern_parts {
  std::string handler;                 ///< the handler's path
  std::optional<std::string> previous; ///< the previous pattern; nullopt when it cannot be read
};

/// Takes apart `pattern` (core_pattern's text) when it pipes cores to a program named
/// faultline-core-handler; nullopt for any other pattern.
std::optional<core_handler_pattern_parts> parse_core_handler_pattern(std::string_view pattern);

/// The handler's view of its arguments (the pattern's %P %s %c %e and the previous pattern).
struct core_handler_args {
  pid_t host_pid = 0;             ///< %P: the pid in the initial pid namespace
  int signal = 0;                 ///< %s
  std::uint64_t limit_bytes = 0;  ///< %c: the soft RLIMIT_CORE (RLIM_INFINITY as 2^64-1)
  std::string comm;               ///< %e: the comm, '/' already '!' (the kernel escapes it)
  std::string previous;           ///< the previous pattern, as it was written into core_pattern
};

/// Parses the handler's argv (argv[0] is the handler). A kernel older than 5.3 split an expanded
/// %e with spaces into several arguments: they are joined back. nullopt when malformed.
std::optional<core_handler_args> parse_core_handler_args(const std::vector<std::string_view>& argv);

/// What the handler knows of a crashing process, for expanding a pattern.
struct crashed_process {
  pid_t pid = 0;                  ///< %p: the pid in its own pid namespace
  pid_t host_pid = 0;             ///< %P
  uid_t uid = 0;                  ///< %u (real)
  gid_t gid = 0;                  ///< %g (real)
  int signal = 0;                 ///< %s
  std::uint64_t limit_bytes = 0;  ///< %c
  std::int64_t time_s = 0;        ///< %t
  int dumpable = 1;               ///< %d
  std::string comm;               ///< %e
  std::string executable;         ///< %E (the path) and %f (its file name)
  std::string hostname;           ///< %h
};

/// Expands core_pattern specifiers in the file pattern `pattern` as the kernel does for a file
/// core: %% %p %P %u %g %s %t %d %e %E %f %h %c; %i and %I (the crashing thread, which the
/// handler is not told) become the pid; any other specifier, and a '%' at the end, become
/// nothing. Values that come from names (%e %E %f %h) have '/' as '!', and "." or ".." or ""
/// as '!'-escaped, as in the kernel. When `uses_pid` (core_uses_pid) and the pattern has no %p,
/// ".PID" is appended.
std::string expand_core_pattern(std::string_view pattern, const crashed_process& p, bool uses_pid);

/// The value of `name` in a /proc/PID/environ image (NUL-separated "K=V"); nullopt when absent.
/// The first occurrence wins, as getenv's does.
std::optional<std::string> environ_value(std::string_view environ_image, std::string_view name);

/// The identities in /proc/PID/status.
struct proc_status_ids {
  uid_t uid = 0, euid = 0, fsuid = 0;  ///< "Uid:" real, effective, filesystem
  gid_t gid = 0, egid = 0, fsgid = 0;  ///< "Gid:"
  std::vector<gid_t> groups;           ///< "Groups:"
  pid_t ns_pid = 0;                    ///< the last "NSpid:" field: the pid in its own namespace
};

/// Parses /proc/PID/status text; nullopt without Uid: or Gid:. Without NSpid: (before Linux
/// 4.1), ns_pid is 0.
std::optional<proc_status_ids> parse_proc_status(std::string_view status);

/// Where core_pattern stands.
struct core_handler_state {
  std::string pattern;                  ///< core_pattern's text
  bool installed = false;               ///< it pipes cores to faultline-core-handler
  std::string handler;                  ///< installed: the handler's path
  std::optional<std::string> previous;  ///< installed: the previous pattern (nullopt: unreadable)
};

/// Reads /proc/sys/kernel/core_pattern. Errors: io_error when it cannot be read.
core::result<core_handler_state> core_handler_status();

/// Installs `handler` (an existing executable, resolved to its real path) as core_pattern's pipe
/// program, keeping the current pattern as the previous one (core_handler_pattern), then checks
/// that the kernel runs it: a test program crashes with FAULTLINE_RUN_DIR set and its core must
/// come back in at most 10 s; when it does not, the previous pattern is restored. The handler
/// runs as root for every crash on the machine, so it and every directory above it must be
/// root's alone (not writable by group or others; a sticky directory such as /tmp is allowed).
/// Returns the new state. Errors: those of core_handler_pattern; invalid_argument when the
/// handler is missing, not executable or not root's alone; refused when not root or core_pattern
/// is not writable here ("core_pattern is not writable here (in a container /proc/sys is often
/// read-only) ..."); unavailable when the test crash's core did not come back.
core::result<core_handler_state> install_core_handler(const std::filesystem::path& handler);

/// Restores the previous pattern of the installed faultline-core-handler pattern ("core", the
/// kernel's default, when it cannot be read). Nothing to do when none is installed. Returns the
/// new state. Errors: refused when core_pattern is not writable here.
core::result<core_handler_state> remove_core_handler();

}  // namespace faultline::harness
