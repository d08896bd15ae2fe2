#include "harness/run/phases.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "faults/preload/phase_table.h"
#include "faults/preload/protocol.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

class phases_test : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/faultline-phases-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path table() const { return dir_ / agent::phase_table_file; }

  // Claims the next slot as the agent would and writes `markers` in it.
  void claim(pid_t pid, const std::string& markers) {
    int fd = ::open(table().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    agent::phase_table_header header{};
    ASSERT_EQ(::pread(fd, &header, sizeof header, 0), static_cast<ssize_t>(sizeof header));
    agent::phase_slot slot{};
    slot.pid = pid;
    slot.used = static_cast<std::uint32_t>(markers.size());
    std::memcpy(slot.markers, markers.data(), markers.size());
    const off_t at = static_cast<off_t>(header.next + 1) * agent::phase_slot_bytes;
    ++header.next;
    ASSERT_EQ(::pwrite(fd, &slot, sizeof slot, at), static_cast<ssize_t>(sizeof slot));
    ASSERT_EQ(::pwrite(fd, &header, sizeof header, 0), static_cast<ssize_t>(sizeof header));
    ::close(fd);
  }

  std::string bytes() const {
    std::ifstream in(table(), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
};

TEST_F(phases_test, reset_makes_an_empty_table_of_the_agents_layout) {
  ASSERT_TRUE(reset_phase_table(dir_));
  std::string b = bytes();
  ASSERT_EQ(b.size(), agent::phase_table_bytes);
  agent::phase_table_header header{};
  std::memcpy(&header, b.data(), sizeof header);
  EXPECT_TRUE(agent::phase_table_valid(header));
  EXPECT_EQ(header.next, 0u);
  EXPECT_EQ(b.find_first_not_of('\0', sizeof header), std::string::npos);
  EXPECT_TRUE(read_phases(dir_).empty());
}

TEST_F(phases_test, reads_every_published_slot_and_phase_files_beside_them) {
  ASSERT_TRUE(reset_phase_table(dir_));
  claim(101, "run\nmain-returned\nexit\n");
  claim(0, "run\n");  // handed out, never published: not a process
  claim(102, "run\n");
  std::ofstream(dir_ / (std::string(agent::phase_file_prefix) + "103")) << "run\nexit\n" << std::string(40, '\0');
  std::ofstream(dir_ / (std::string(agent::phase_file_prefix) + "x1")) << "run\n";  // not a pid
  auto phases = read_phases(dir_);
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[101], "run\nmain-returned\nexit\n");
  EXPECT_EQ(phases[102], "run\n");
  EXPECT_EQ(phases[103], "run\nexit\n");
}

TEST_F(phases_test, reset_clears_what_the_last_run_wrote) {
  ASSERT_TRUE(reset_phase_table(dir_));
  for (pid_t pid = 1; pid <= 5; ++pid) claim(pid, "run\nexit\n");
  ASSERT_EQ(read_phases(dir_).size(), 5u);
  ASSERT_TRUE(reset_phase_table(dir_));
  std::string b = bytes();
  EXPECT_EQ(b.size(), agent::phase_table_bytes);
  EXPECT_EQ(b.find_first_not_of('\0', sizeof(agent::phase_table_header)), std::string::npos);
  EXPECT_TRUE(read_phases(dir_).empty());
}

TEST_F(phases_test, a_file_of_another_layout_is_replaced_and_never_read) {
  std::ofstream(table(), std::ios::binary) << std::string(100, 'x');
  EXPECT_TRUE(read_phases(dir_).empty());
  ASSERT_TRUE(reset_phase_table(dir_));
  EXPECT_EQ(bytes().size(), agent::phase_table_bytes);
  claim(7, "run\n");
  EXPECT_EQ(read_phases(dir_)[7], "run\n");
}

TEST_F(phases_test, reset_names_the_file_when_it_cannot_be_made) {
  fs::create_directory(table());  // a directory where the table should be
  auto st = reset_phase_table(dir_);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find(table().string()), std::string::npos) << st.message();
}

}  // namespace
}  // namespace faultline::harness
