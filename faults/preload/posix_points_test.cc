// posix/ and libc/ points (posix_points.h): libfiu's POSIX preload, asked through the agent's
// callback, in programs that know nothing of faultline (coreutils' cat), directly and through
// `faultline exec`.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "faults/preload/testing/preload_run.h"

namespace faultline::agent {
namespace {

namespace fs = std::filesystem;
using testing::exited_0;

std::string fiu_preload() {
  for (const char* p : {"/usr/lib/fiu/fiu_posix_preload.so", "/usr/local/lib/fiu/fiu_posix_preload.so",
                        "/usr/lib/x86_64-linux-gnu/fiu/fiu_posix_preload.so"}) {
    if (fs::exists(p)) return p;
  }
  return "";
}

class posix_points : public ::testing::Test {
 protected:
  void SetUp() override {
    fiu_ = fiu_preload();
    if (fiu_.empty()) GTEST_SKIP() << "libfiu's fiu_posix_preload.so is not installed (Debian: fiu-utils)";
    std::ofstream(runner_.dir() / "data.txt") << "hello\n";
  }
  testing::preload_runner runner_{std::string(FAULTLINE_AGENT_PRELOAD) + ":" + fiu_preload()};
  std::string fiu_;
  std::string data() const { return (runner_.dir() / "data.txt").string(); }
};

TEST_F(posix_points, fail_gives_the_named_errno_and_only_where_the_item_points) {
  auto ok = runner_.run("posix/io/oc/opendir=fail(EIO)", {"cat", data()});
  ASSERT_TRUE(exited_0(ok)) << ok.err;
  EXPECT_EQ(ok.out, "hello\n");
  auto f = runner_.run("posix/io/oc/open=fail(ENOSPC)", {"cat", data()});
  EXPECT_FALSE(exited_0(f));
  EXPECT_NE(f.err.find("No space left on device"), std::string::npos) << f.err;
  EXPECT_EQ(runner_.reached(f.pid), "posix/io/oc/open\n");
}

TEST_F(posix_points, counts_and_probabilities_follow_the_spec_and_its_seed) {
  // Two opens (cat A A): the first fails, the second does not.
  auto f = runner_.run("posix/io/oc/open=1*fail(EACCES)", {"cat", data(), data()});
  EXPECT_FALSE(exited_0(f));
  EXPECT_EQ(f.out, "hello\n");
  EXPECT_NE(f.err.find("Permission denied"), std::string::npos) << f.err;
  // 50%: the same seed gives the same outcome, run after run.
  std::string first;
  for (int i = 0; i < 3; ++i) {
    auto g = runner_.run("posix/io/oc/open=50%fail(EIO)", {"cat", data(), data(), data(), data()}, {"FAULTLINE_SEED=7"});
    if (i == 0) first = g.out + g.err;
    EXPECT_EQ(g.out + g.err, first);
  }
}

TEST_F(posix_points, faultline_exec_preloads_libfiu_for_them) {
  const std::string summary = (runner_.dir() / "summary.json").string();
  const std::string cmd = std::string(FAULTLINE_CLI) + " exec --json --out " + (runner_.dir() / "c").string() +
                          " --faults 'posix/io/oc/open=fail(ENOSPC);posix/io/net/connect=fail' -- cat " + data() +
                          " > " + summary + " 2>/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);  // cat failed: the run failed
  const std::string json = testing::slurp(summary);
  EXPECT_NE(json.find("\"fail\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"points_never_reached\":[\"posix/io/net/connect\"]"), std::string::npos) << json;
}

}  // namespace
}  // namespace faultline::agent
