// fl_testdata_fail: a run that fails the way a scenario does when an invariant breaks: it names
// the invariant on stderr and exits 3 (outcome `fail`, phase `run`).
#include <cstdio>

int main() {
  std::printf("checking the demo invariant\n");
  std::fflush(stdout);
  std::fprintf(stderr, "invariant violated: demo: expected 1, got 2\n");
  return 3;
}
