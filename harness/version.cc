#include "harness/version.h"

// Both are set on this file alone (harness/CMakeLists.txt), so a new commit recompiles only it.
#ifndef FAULTLINE_VERSION
#error "FAULTLINE_VERSION is set by harness/CMakeLists.txt"
#endif
#ifndef FAULTLINE_BUILD_COMMIT
#error "FAULTLINE_BUILD_COMMIT is set by harness/CMakeLists.txt"
#endif

namespace faultline::harness {

std::string_view version() noexcept { return FAULTLINE_VERSION; }

std::string_view build_commit() noexcept { return FAULTLINE_BUILD_COMMIT; }

std::string version_line() {
  return "faultline " + std::string(version()) + " (commit " + std::string(build_commit()) + ")";
}

}  // namespace faultline::harness
