// `faultline region` on real regions: a healthy one, one whose process died holding memory (a
// problem until --repair), and every kind of file that is not a region (exit 2, one line).
#include "harness/region_cli.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/accounting/region.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
namespace acc = faultline::accounting;

struct outcome {
  int status;
  std::string out, err;
};

outcome region(const std::string& path, bool repair = false, bool json = false) {
  std::ostringstream out, err;
  int status = region_command(path, repair, json, out, err);
  return {status, out.str(), err.str()};
}

class region_cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fl_region_cli." + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static acc::options opts() {
    acc::options o;
    o.devices = 2;
    o.limits_bytes = {1ull << 30, 1ull << 30};
    o.max_slots = 8;
    o.exit_handlers = false;
    return o;
  }
  fs::path dir_;
};

TEST_F(region_cli, a_healthy_region_is_listed_and_exits_zero) {
  auto r = acc::region::create_or_attach(path("ok"), opts());
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_TRUE((*r)->register_process());
  ASSERT_TRUE((*r)->charge(1, acc::kind::data, 3 << 20));
  auto o = region(path("ok"));
  EXPECT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("2 devices, 8 slots"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("pid " + std::to_string(::getpid()) + " alive, device 1 3.0 MiB"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("healthy"), std::string::npos) << o.out;
  auto j = nlohmann::json::parse(region(path("ok"), false, true).out);
  EXPECT_EQ(j["slots"][0]["devices"][1]["data"], 3u << 20);
  EXPECT_EQ(j["device_usage"][1]["aggregate_bytes"], 3u << 20);
  EXPECT_TRUE(j["healthy"].get<bool>());
}

TEST_F(region_cli, a_process_killed_with_memory_charged_is_a_problem_until_repaired) {
  ASSERT_TRUE(acc::region::create_or_attach(path("dead"), opts()));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto r = acc::region::attach(path("dead"), opts());
    if (!r || !(*r)->register_process() || !(*r)->charge(0, acc::kind::data, 5 << 20)) ::_exit(3);
    ::raise(SIGKILL);  // no exit cleanup: the slot and the aggregate stay charged
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFSIGNALED(st)) << st;
  auto before = region(path("dead"));
  EXPECT_EQ(before.status, 1) << before.out;
  EXPECT_NE(before.out.find("pid " + std::to_string(child) + " dead"), std::string::npos) << before.out;
  EXPECT_NE(before.out.find("problem:"), std::string::npos) << before.out;
  auto fixed = region(path("dead"), true);
  EXPECT_EQ(fixed.status, 0) << fixed.out << fixed.err;
  EXPECT_NE(fixed.out.find("1 dead slots reclaimed"), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("healthy"), std::string::npos) << fixed.out;
  EXPECT_EQ(region(path("dead")).status, 0);
}

TEST_F(region_cli, files_that_are_not_regions_are_one_line_errors_with_status_two) {
  std::ofstream(path("garbage")) << std::string(4096, 'x');
  std::ofstream(path("empty"));
  ASSERT_TRUE(acc::region::create_or_attach(path("real"), opts()));
  fs::resize_file(path("real"), 100);  // truncated
  fs::create_symlink(path("garbage"), path("link"));
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);  // must not wait for a writer
  fs::create_directory(path("dir"));
  for (const char* name : {"missing", "garbage", "empty", "real", "link", "fifo", "dir"}) {
    auto o = region(path(name));
    EXPECT_EQ(o.status, 2) << name << ": " << o.out;
    EXPECT_TRUE(o.out.empty()) << name;
    EXPECT_EQ(o.err.rfind("faultline: error: ", 0), 0u) << o.err;
    EXPECT_NE(o.err.find(path(name)), std::string::npos) << name << ": " << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_EQ(region(path(name), true).status, 2) << name << " --repair";
  }
}

}  // namespace
}  // namespace faultline::harness
