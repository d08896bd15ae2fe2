// Test helper: a test process that dies of a fatal signal prints every thread's stack first, so
// that CI's log names what crashed (CTest shows a failed test's output).
//
//   int main(int argc, char** argv) {
//     ::testing::InitGoogleTest(&argc, argv);
//     faultline::core::testing::install_crash_stacks_from_env();
//     return RUN_ALL_TESTS();
//   }
//
// Opt-in: only where FAULTLINE_TEST_CRASH_STACKS=1 (ci/test.sh sets it for its CTest passes),
// never in a GoogleTest death-test child (its crash is the test's expectation), never in a run of
// faultline (FAULTLINE_RUN_DIR set: faultline names the crash from its core, untouched). The
// handler stops the process's other threads only once a stack reader (eu-stack, else gdb)
// attaches, so a crash that races the process's exit can still be lost to the exit meanwhile:
// this names what CTest saw crash; it is not how exit races are hunted (ci/exit-hunt.sh runs the
// same binaries under faultline, which installs no handler). The handler then restores the
// default action and re-raises, so the process dies of the same signal as before.
// Test-only.
#pragma once

namespace faultline::core::testing {

/// Installs the handler for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT when the environment asks
/// for it (see above). Returns true when it was installed. Call once, after InitGoogleTest.
bool install_crash_stacks_from_env();

/// Installs it unconditionally (the test of the helper itself).
void install_crash_stacks();

}  // namespace faultline::core::testing
