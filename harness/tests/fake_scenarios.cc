// faultline-fake-scenarios: a stand-in for faultline-scenarios with the same command-line
// contract (see harness/campaign/scenario_catalog.h), so that `faultline list/run/verify` are tested
// without the real catalog. A permanent test fixture.
//
//   fake/counter   passes; its bug point bug/fake/skip-check makes it fail with
//                  "invariant violated: fake/counter-balanced: ..." (detect_rate 0.95). With
//                  FAKE_SCENARIOS_MISS_BUG=1 in the environment the bug goes undetected, so
//                  verify must report FAIL.
//   fake/behave    passes, unless FAULTLINE_FAULTS enables (e.g. "fake/crash=print") one of:
//                    fake/crash             SIGSEGV
//                    fake/hang              blocks forever
//                    fake/fail-on-odd-seed  fails (invariant fake/even-seed) when the seed is odd
//                  Its fault space (for `faultline soak`) holds fake/fail-on-odd-seed and a
//                  harmless fake/noise, so a soak of it fails now and then, reproducibly.
// With FAKE_LEAK_SHM=1 every run leaves /dev/shm/faultline-fake-leak-PID behind.
//
// Every run prints one line describing what it received:
//   fake: name=N seed=S faults=F run_dir=D echo=$FAKE_ECHO gtest_shards=$GTEST_TOTAL_SHARDS
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool fault_named(const std::string& faults, const char* point) { return faults.find(point) != std::string::npos; }

int list() {
  nlohmann::json catalog = nlohmann::json::array();
  catalog.push_back({{"name", "fake/counter"},
                     {"description", "a counter that must balance"},
                     {"timeout_ms", 10000},
                     {"bug_points", {{{"point", "bug/fake/skip-check"}, {"faults", "bug/fake/skip-check=1*print"}, {"detect_rate", 0.95}}}},
                     {"fault_space", {"fake/noise=1..50%delay(1us..1ms)"}}});
  catalog.push_back({{"name", "fake/behave"},
                     {"description", "does what its faults say"},
                     {"timeout_ms", 5000},
                     {"bug_points", nlohmann::json::array()},
                     {"fault_space", {"fake/fail-on-odd-seed=print", "fake/noise=1..3*delay(1us..10us)"}}});
  std::fprintf(stderr, "[fake] listing 2 scenarios\n");  // noise on stderr must not confuse the parser
  std::printf("%s\n", catalog.dump(2).c_str());
  return 0;
}

int run(const std::string& name) {
  const std::string faults = env("FAULTLINE_FAULTS");
  const unsigned long long seed = std::strtoull(env("FAULTLINE_SEED").c_str(), nullptr, 10);
  std::printf("fake: name=%s seed=%llu faults=%s run_dir=%s echo=%s gtest_shards=%s\n", name.c_str(), seed, faults.c_str(),
              env("FAULTLINE_RUN_DIR").c_str(), env("FAKE_ECHO").c_str(), env("GTEST_TOTAL_SHARDS").c_str());
  std::fflush(stdout);
  if (env("FAKE_LEAK_SHM") == "1") {
    const std::string shm_name = "/faultline-fake-leak-" + std::to_string(::getpid());
    const int fd = ::shm_open(shm_name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd >= 0) ::close(fd);
  }
  if (name == "fake/counter") {
    if (fault_named(faults, "bug/fake/skip-check") && env("FAKE_SCENARIOS_MISS_BUG") != "1") {
      std::fprintf(stderr, "invariant violated: fake/counter-balanced: 1 != 0\n");
      return 1;
    }
    return 0;
  }
  if (name == "fake/behave") {
    if (fault_named(faults, "fake/crash")) {
      std::signal(SIGSEGV, SIG_DFL);
      std::raise(SIGSEGV);
    }
    if (fault_named(faults, "fake/hang"))
      for (;;) ::pause();
    if (fault_named(faults, "fake/fail-on-odd-seed") && seed % 2 == 1) {
      std::fprintf(stderr, "invariant violated: fake/even-seed: seed %llu is odd\n", seed);
      return 1;
    }
    return 0;
  }
  std::fprintf(stderr, "unknown scenario %s\n", name.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "list") == 0) return list();
  if (argc == 3 && std::strcmp(argv[1], "run") == 0) return run(argv[2]);
  std::fprintf(stderr, "usage: faultline-fake-scenarios list --json | run NAME\n");
  return 2;
}
