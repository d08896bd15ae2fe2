// Goal: faults::launcher starts real worker processes with their own seeds and merged fault
// specs, and reports how each ended (exit code, signal, killed at the deadline); merge_specs
// replaces a base item naming the same point and rejects a malformed spec as a value.
// Method: /bin/sh workers writing what they saw to files in a temporary directory; every wait has a
// generous timeout and no test asserts how fast anything happens.
#include "faults/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace faultline::faults {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr auto generous = 30s;

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("faultline-launcher-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // A worker is `sh -c SCRIPT NAME ARG...`: the script sees its name as $0 and its args as $1...
  static std::vector<std::string> shell(std::string script) { return {"/bin/sh", "-c", std::move(script)}; }

  fs::path dir_;
};

TEST_F(LauncherTest, EachWorkerGetsItsOwnSeedAndTheMergedSpec) {
  generator seeds(42);
  launcher l(shell("printf '%s\\n%s\\n' \"$FAULTLINE_SEED\" \"$FAULTLINE_FAULTS\" > \"$1\""),
             "a/b=print;c/d=delay(1ms)", seeds);
  auto p1 = l.start("w1", {file("w1")}, "c/d=kill");
  auto p2 = l.start("w2", {file("w2")});
  ASSERT_TRUE(p1) << p1.error().to_string();
  ASSERT_TRUE(p2) << p2.error().to_string();
  const auto done = l.collect(generous);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& w : done) EXPECT_EQ(w.status(), 0) << describe(w);

  generator replay(42);
  const std::uint64_t s1 = replay.next(), s2 = replay.next();
  EXPECT_NE(s1, s2);
  EXPECT_EQ(done[0].seed, s1);
  EXPECT_EQ(done[1].seed, s2);
  EXPECT_EQ(read(file("w1")), std::to_string(s1) + "\na/b=print;c/d=kill\n");
  EXPECT_EQ(read(file("w2")), std::to_string(s2) + "\na/b=print;c/d=delay(1ms)\n");
}

TEST_F(LauncherTest, CollectTellsExitFromSignalFromStillRunning) {
  generator seeds(1);
  launcher l(shell("case \"$0\" in exit3) exit 3;; term) kill -TERM $$;; *) exec sleep 60;; esac"), "", seeds);
  ASSERT_TRUE(l.start("exit3", {}));
  ASSERT_TRUE(l.start("term", {}));
  auto slow = l.start("forever", {});
  ASSERT_TRUE(slow);
  EXPECT_EQ(l.wait(*slow, 50ms), -1);  // still running, left running
  // Give the two quick ones time to end, then collect with a short deadline for the slow one.
  auto exit3 = l.workers()[0].pid, term = l.workers()[1].pid;
  EXPECT_EQ(l.wait(exit3, generous), 3);
  EXPECT_EQ(l.wait(term, generous), 128 + SIGTERM);
  const auto done = l.collect(100ms);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_TRUE(done[0].finished);
  EXPECT_EQ(done[0].exit_code, 3);
  EXPECT_EQ(done[1].signal, SIGTERM);
  EXPECT_FALSE(done[1].killed);
  EXPECT_TRUE(done[2].killed);
  EXPECT_EQ(done[2].status(), -1);
  EXPECT_NE(describe(done[2]).find("still running at the deadline"), std::string::npos) << describe(done[2]);
  EXPECT_NE(describe(done[1]).find("killed by SIGTERM"), std::string::npos) << describe(done[1]);
  EXPECT_EQ(l.wait(*slow, 0ms), -1);
  EXPECT_EQ(l.wait(12345678, 0ms), -1);  // not ours
}

TEST_F(LauncherTest, GoPipeReleasesWaitingWorkersTogether) {
  generator seeds(7);
  launcher l(shell("cat > /dev/null; echo released > \"$1\""), "", seeds);
  int go1 = -1, go2 = -1;
  auto a = l.start("a", {file("a")}, {}, &go1);
  auto b = l.start("b", {file("b")}, {}, &go2);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(l.wait(*a, 100ms), -1) << "a worker went on before its go pipe was closed";
  ::close(go1);
  ::close(go2);
  EXPECT_EQ(l.wait(*a, generous), 0);
  EXPECT_EQ(l.wait(*b, generous), 0);
  EXPECT_EQ(read(file("a")), "released\n");
  EXPECT_EQ(read(file("b")), "released\n");
}

TEST_F(LauncherTest, DestructionKillsWhatStillRuns) {
  pid_t pid = -1;
  {
    generator seeds(3);
    launcher l(shell("exec sleep 60"), "", seeds);
    auto p = l.start("sleeper", {});
    ASSERT_TRUE(p);
    pid = *p;
  }
  EXPECT_NE(::kill(pid, 0), 0) << "worker " << pid << " outlived its launcher";
}

TEST_F(LauncherTest, BadInputIsAnErrorValue) {
  generator seeds(5);
  launcher bad_base(shell("exit 0"), "a/b=fial", seeds);
  auto r = bad_base.start("w", {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), core::errc::invalid_argument);
  EXPECT_NE(r.error().message().find("base fault spec"), std::string::npos) << r.error().message();

  launcher good(shell("exit 0"), "", seeds);
  auto r2 = good.start("w", {}, "x/y=");
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code(), core::errc::invalid_argument);
  EXPECT_NE(r2.error().message().find("worker fault spec"), std::string::npos) << r2.error().message();

  launcher missing({"/nonexistent/faultline-worker"}, "", seeds);
  auto r3 = missing.start("w", {});
  ASSERT_FALSE(r3);
  EXPECT_NE(r3.error().message().find("posix_spawn"), std::string::npos) << r3.error().message();

  launcher empty({}, "", seeds);
  EXPECT_FALSE(empty.start("w", {}));
  EXPECT_TRUE(good.workers().empty() && missing.workers().empty() && empty.workers().empty());
}

TEST(MergeSpecs, ReplacesItemsNamingTheSamePoint) {
  auto m = merge_specs("a/b=print;c/d=delay(5ms)", "c/d=1*kill;e/f=abort");
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(*m, "a/b=print;c/d=1*kill;e/f=abort");
  auto same = merge_specs("a/b=print", "");
  ASSERT_TRUE(same);
  EXPECT_EQ(*same, "a/b=print");
}

}  // namespace
}  // namespace faultline::faults
