// The keeper program's arguments: what the harness writes, faultline-keeper reads back exactly,
// and anything else is refused with a message naming the problem.
#include "harness/run/keeper.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace faultline::harness::keeper {
namespace {

struct argv_holder {
  std::vector<std::string> words;
  std::vector<char*> ptrs;
  explicit argv_holder(std::vector<std::string> w) : words(std::move(w)) {
    for (auto& s : words) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(words.size()); }
  char* const* argv() { return ptrs.data(); }
};

TEST(keeper_arguments, what_the_harness_writes_the_keeper_reads_back) {
  argv_holder program({"/bin/prog", "--flag", "", "two words"});
  const int keep[] = {7, 9};
  plan p;
  p.socket_fd = 3;
  p.lifeline_fd = 4;
  p.null_fd = 5;
  p.stdout_fd = 6;
  p.cgroup_procs_fd = 10;
  p.cgroup_kill_fd = 11;
  p.cgroup_dir = "/sys/fs/cgroup/faultline.1.2";
  p.keep_fds = keep;
  p.keep_count = 2;
  p.new_process_group = false;
  p.path = "/bin/prog";
  p.cwd = "/tmp/run dir";
  p.argv = program.argv();

  argv_holder args(keeper_arguments(p, -1));
  char* env[] = {const_cast<char*>("A=1"), nullptr};
  parsed_storage storage;
  plan back;
  std::string error;
  ASSERT_TRUE(parse_keeper_arguments(args.argc(), args.argv(), env, storage, back, error)) << error;
  EXPECT_EQ(back.socket_fd, 3);
  EXPECT_EQ(back.lifeline_fd, 4);
  EXPECT_EQ(back.null_fd, 5);
  EXPECT_EQ(back.stdout_fd, 6);
  EXPECT_EQ(back.stderr_fd, -1) << "not given: stays unset";
  EXPECT_EQ(back.cgroup_procs_fd, 10);
  EXPECT_EQ(back.cgroup_kill_fd, 11);
  EXPECT_STREQ(back.cgroup_dir, "/sys/fs/cgroup/faultline.1.2");
  ASSERT_EQ(back.keep_count, 2u);
  EXPECT_EQ(back.keep_fds[0], 7);
  EXPECT_EQ(back.keep_fds[1], 9);
  EXPECT_FALSE(back.new_process_group);
  EXPECT_STREQ(back.path, "/bin/prog");
  EXPECT_STREQ(back.cwd, "/tmp/run dir");
  EXPECT_FALSE(back.pid_namespace);
  std::vector<std::string> argv_back;
  for (char* const* a = back.argv; *a != nullptr; ++a) argv_back.emplace_back(*a);
  EXPECT_EQ(argv_back, program.words) << "the program's words, empty and spaced ones too";
  EXPECT_EQ(back.envp, env) << "without --env-fd the keeper's own environment";
}

TEST(keeper_arguments, the_programs_environment_travels_on_a_descriptor_not_the_command_line) {
  argv_holder program({"prog"});
  plan p;
  p.socket_fd = 3;
  p.lifeline_fd = 4;
  p.path = "/bin/prog";
  p.argv = program.argv();
  char* env[] = {const_cast<char*>("SECRET=hunter2"), const_cast<char*>("EMPTY="), nullptr};
  const std::string block = environment_block(env);
  EXPECT_EQ(block, std::string("SECRET=hunter2\0EMPTY=\0", 22));
  int fd = ::memfd_create("env", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, block.data(), block.size()), static_cast<ssize_t>(block.size()));
  ASSERT_EQ(::lseek(fd, 0, SEEK_SET), 0);

  argv_holder args(keeper_arguments(p, fd));
  for (const auto& w : args.words) EXPECT_EQ(w.find("hunter2"), std::string::npos) << w;
  parsed_storage storage;
  plan back;
  std::string error;
  char* own[] = {nullptr};
  ASSERT_TRUE(parse_keeper_arguments(args.argc(), args.argv(), own, storage, back, error)) << error;
  std::vector<std::string> env_back;
  for (char* const* e = back.envp; *e != nullptr; ++e) env_back.emplace_back(*e);
  EXPECT_EQ(env_back, (std::vector<std::string>{"SECRET=hunter2", "EMPTY="}));
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "the keeper closes the descriptor once read";
}

TEST(keeper_arguments, malformed_arguments_are_refused_naming_the_problem) {
  struct bad_case {
    std::vector<std::string> words;
    std::string expected;
  };
  const std::vector<bad_case> cases = {
      {{}, "no program after --"},
      {{"--socket", "3", "--lifeline", "4", "--path", "/p", "--"}, "no program after --"},
      {{"--socket", "3", "--lifeline", "4", "--path", "/p"}, "no program after --"},
      {{"--lifeline", "4", "--path", "/p", "--", "p"}, "--socket and --lifeline are required"},
      {{"--socket", "3", "--lifeline", "4", "--", "p"}, "--path is required"},
      {{"--socket", "x3", "--lifeline", "4", "--path", "/p", "--", "p"}, "--socket: not a descriptor: x3"},
      {{"--socket", "-1", "--lifeline", "4", "--path", "/p", "--", "p"}, "--socket: not a descriptor: -1"},
      {{"--socket", "99999999999", "--lifeline", "4", "--path", "/p", "--", "p"}, "--socket: not a descriptor"},
      {{"--socket", "3", "--lifeline", "4", "--keep", "", "--path", "/p", "--", "p"}, "--keep: not a descriptor"},
      {{"--socket", "3", "--lifeline", "4", "--path", "/p", "--bogus", "--", "p"}, "unknown argument: --bogus"},
      {{"--socket", "3", "--lifeline"}, "--lifeline needs a value"},
  };
  for (const auto& c : cases) {
    argv_holder args(c.words);
    parsed_storage storage;
    plan back;
    std::string error;
    char* env[] = {nullptr};
    EXPECT_FALSE(parse_keeper_arguments(args.argc(), args.argv(), env, storage, back, error)) << c.expected;
    EXPECT_NE(error.find(c.expected), std::string::npos) << "got: " << error;
  }
}

}  // namespace
}  // namespace faultline::harness::keeper
