// The core keeper holds a core only while a run that may own it is running: what no run claimed
// is let go once every run that was running when it appeared has ended (issue 38: an `exec` of a
// death test held 63-64 deleted cores, and a soak counted them as the harness's leaks). Method: a
// scratch directory watched for a file name of this test's own, files created there as the kernel
// creates a core, and the keeper's descriptors read back.
#include "harness/run/core_keeper.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

class core_keeper_test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/faultline-core-keeper-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(core_keeper::instance().watch(dir_, name_)) << "inotify";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Creates the file as the kernel creates a core: unlink the old name, create a new file.
  void dump() {
    ::unlink((dir_ / name_).c_str());
    const int fd = ::open((dir_ / name_).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "core", 4), 4);
    ::close(fd);
  }
  // How many cores of the directory the keeper holds (each lent descriptor given back).
  std::size_t held_now() {
    auto& keeper = core_keeper::instance();
    auto held = keeper.held(dir_);
    for (const auto& c : held) keeper.release(c, false);
    return held.size();
  }
  bool eventually_held(std::size_t n) {
    for (int i = 0; i < 250; ++i) {
      if (held_now() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  fs::path dir_;
  const std::string name_ = "core-keeper-test";
};

TEST_F(core_keeper_test, a_core_no_run_claimed_is_let_go_once_the_runs_that_could_own_it_ended) {
  auto& keeper = core_keeper::instance();
  const auto first = keeper.begin_run();
  dump();
  ASSERT_TRUE(eventually_held(1));
  // A run that began later cannot own it, and keeps nothing alive.
  const auto later = keeper.begin_run();
  keeper.end_run(first);
  EXPECT_EQ(held_now(), 0u) << "held after every run that was running when it appeared ended";
  EXPECT_TRUE(fs::exists(dir_ / name_)) << "another process's core: its name stays";
  keeper.end_run(later);
}

TEST_F(core_keeper_test, its_descriptors_are_those_it_holds_and_lends) {
  auto& keeper = core_keeper::instance();
  const auto run = keeper.begin_run();
  dump();
  ASSERT_TRUE(eventually_held(1));
  auto lent = keeper.held(dir_);
  ASSERT_EQ(lent.size(), 1u);
  const auto fds = keeper.descriptors();
  EXPECT_EQ(fds.count(lent[0].fd), 1u) << "a lent descriptor is the keeper's";
  EXPECT_GE(fds.size(), 3u) << "inotify, the held core, the lent one";
  keeper.release(lent[0], true);  // the run's: read and gone
  EXPECT_EQ(keeper.descriptors().count(lent[0].fd), 0u);
  EXPECT_FALSE(fs::exists(dir_ / name_));
  keeper.end_run(run);
}

TEST_F(core_keeper_test, it_follows_a_run_where_its_processes_record_they_went_until_the_run_ends) {
  // The run directory and the directory a process of the run moved to (protocol.h, cwd.PID).
  const fs::path run_dir = dir_ / "run";
  const fs::path away = dir_ / "away";
  fs::create_directories(run_dir);
  fs::create_directories(away);
  auto& keeper = core_keeper::instance();
  const auto run = keeper.begin_run();
  ASSERT_TRUE(keeper.follow(run_dir, name_));
  {
    std::ofstream part(run_dir / "cwd.42.part");
    part << away.string();
  }
  fs::rename(run_dir / "cwd.42.part", run_dir / "cwd.42");
  auto dump_away = [&] {
    ::unlink((away / name_).c_str());
    std::ofstream(away / name_) << "core";
  };
  auto held_away = [&] {
    auto held = keeper.held(away);
    for (const auto& c : held) keeper.release(c, false);
    return held.size();
  };
  // The keeper's thread adds the watch once it has read the record: dump until it is held.
  bool held = false;
  for (int i = 0; i < 100 && !held; ++i) {
    dump_away();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    held = held_away() > 0;
  }
  EXPECT_TRUE(held) << "a core where the record points is held";
  keeper.unfollow(run_dir);
  keeper.end_run(run);
  EXPECT_EQ(held_away(), 0u);
  // The directory is no longer watched: a core there while another run runs is not held.
  const auto later = keeper.begin_run();
  dump_away();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(held_away(), 0u);
  keeper.end_run(later);
}

TEST_F(core_keeper_test, a_core_that_appears_while_no_run_is_running_is_not_held) {
  dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(held_now(), 0u);
}

}  // namespace
}  // namespace faultline::harness
