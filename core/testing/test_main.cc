// Shared main() for every gtest binary: death tests re-exec the binary ("threadsafe" style) rather
// than fork after threads or a device runtime may exist; with FAULTLINE_TEST_CRASH_STACKS=1 (CI's
// CTest passes), a test process that dies of a fatal signal prints every thread's stack first
// (crash_stacks.h).
#include <gtest/gtest.h>

#include "core/testing/crash_stacks.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  (void)faultline::core::testing::install_crash_stacks_from_env();
  return RUN_ALL_TESTS();
}
