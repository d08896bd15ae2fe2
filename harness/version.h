// The version of faultline and the commit it was built from, as `faultline --version` prints them.
//
//   std::cout << harness::version_line() << "\n";   // "faultline 0.1.0 (commit 159e504)"
//
// The version is the project's (CMakeLists.txt's project() call); the commit is `git rev-parse
// --short HEAD` of the source tree when it was configured ("unknown" outside git), so a build
// made before a commit and not reconfigured since names the commit it was configured at.
//
// Thread safety: constants.
#pragma once

#include <string>
#include <string_view>

namespace faultline::harness {

/// The project version, "MAJOR.MINOR.PATCH".
std::string_view version() noexcept;

/// The short commit of the source tree at configure time, or "unknown".
std::string_view build_commit() noexcept;

/// "faultline VERSION (commit COMMIT)".
std::string version_line();

}  // namespace faultline::harness
