// read_state_file / write_state_file: the JSON state files of an output directory (campaign.json,
// soak.json). The goal: what is written reads back, with "format" stamped; a missing file is
// "none", not an error; a file that is not JSON, has another format, or lacks what the parser
// reads is corrupt with the file and the kind of state named; a failed write leaves the old file.
// Method: files in a directory of the test's own.
#include "harness/campaign/state_file.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

class state_file : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fl_state_file." + std::to_string(::getpid()) + "." +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void put(const std::string& text) { std::ofstream(path()) << text; }
  fs::path path() const { return dir_ / "state.json"; }

  fs::path dir_;
};

TEST_F(state_file, what_is_written_reads_back_with_its_format) {
  ASSERT_TRUE(write_state_file(path(), {{"seed", 7}, {"names", {"a", "b"}}}));
  std::uint64_t seed = 0;
  nlohmann::json seen;
  auto found = read_state_file(path(), "test state", [&](const nlohmann::json& j) {
    seed = j.at("seed").get<std::uint64_t>();
    seen = j;
  });
  ASSERT_TRUE(found) << found.error().message();
  EXPECT_TRUE(*found);
  EXPECT_EQ(seed, 7u);
  EXPECT_EQ(seen["format"], state_file_format);
  EXPECT_FALSE(fs::exists(path().string() + ".tmp"));
}

TEST_F(state_file, a_missing_file_is_none_and_parse_is_not_called) {
  bool called = false;
  auto found = read_state_file(path(), "test state", [&](const nlohmann::json&) { called = true; });
  ASSERT_TRUE(found) << found.error().message();
  EXPECT_FALSE(*found);
  EXPECT_FALSE(called);
}

TEST_F(state_file, a_file_that_is_not_the_state_is_corrupt_naming_it) {
  auto read_seed = [&] {
    return read_state_file(path(), "test state", [](const nlohmann::json& j) { (void)j.at("seed").get<std::uint64_t>(); });
  };
  for (const char* text : {"{\"format\": 1, \"seed\": 3", "{\"format\": 2, \"seed\": 3}", "{\"seed\": 3}",
                           "{\"format\": 1}", "{\"format\": 1, \"seed\": \"three\"}"}) {
    put(text);
    auto found = read_seed();
    ASSERT_FALSE(found) << text;
    EXPECT_EQ(found.code(), core::errc::corrupt) << text;
    EXPECT_NE(found.error().message().find(path().string() + " is not a faultline test state: "), std::string::npos)
        << found.error().message();
  }
}

TEST_F(state_file, a_write_that_fails_leaves_the_old_file) {
  ASSERT_TRUE(write_state_file(path(), {{"seed", 1}}));
  fs::create_directory(path().string() + ".tmp");  // the temporary file cannot be opened
  auto written = write_state_file(path(), {{"seed", 2}});
  EXPECT_FALSE(written);
  EXPECT_NE(written.message().find("state.json.tmp"), std::string::npos) << written.message();
  std::uint64_t seed = 0;
  ASSERT_TRUE(read_state_file(path(), "test state", [&](const nlohmann::json& j) { seed = j.at("seed").get<std::uint64_t>(); }));
  EXPECT_EQ(seed, 1u);
}

}  // namespace
}  // namespace faultline::harness
