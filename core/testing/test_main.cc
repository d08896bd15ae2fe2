// Shared main() for every gtest binary: death tests re-exec the binary ("threadsafe" style) rather
// than fork after threads or a device runtime may exist.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
