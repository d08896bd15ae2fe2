// fl_testdata_gtest_exit_crash: a GoogleTest binary whose tests all pass and which then crashes
// at exit: after RUN_ALL_TESTS() has returned (and written GTEST_OUTPUT's XML report and deleted
// TEST_PREMATURE_EXIT_FILE, as GoogleTest does when the tests are over), a static destructor
// writes through a null pointer in gtest_exit_crash_destructor_frame(). A harness that believes
// the XML or the premature-exit file reports a pass; the wait status says SIGSEGV. Honours the
// usual gtest flags and environment (filters, sharding, GTEST_OUTPUT).
#include <cstdio>

#include <gtest/gtest.h>

[[gnu::noinline]] void gtest_exit_crash_destructor_frame() {
  int* volatile target = nullptr;
  *target = 1;
  asm volatile("" ::: "memory");
}

namespace {

struct torn_down_at_exit {
  ~torn_down_at_exit() { gtest_exit_crash_destructor_frame(); }
};

torn_down_at_exit pool;

TEST(exit_crash_demo, arithmetic_holds) { EXPECT_EQ(1 + 1, 2); }

TEST(exit_crash_demo, strings_compare) { EXPECT_STREQ("pool", "pool"); }

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int result = RUN_ALL_TESTS();
  std::fflush(stdout);  // the crash comes before exit() would flush stdio
  return result;
}
