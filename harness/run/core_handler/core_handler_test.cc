// The logic of faultline-core-handler without the kernel (no root needed): the pattern that
// `faultline cores --install` writes and takes apart again (the previous pattern rides as the
// last argument, its '%' doubled, since the kernel expands a pipe pattern's arguments), the
// refusals (too long, white space, another collector's pipe or socket), installing twice, the
// handler's argv, the kernel's specifier expansion for the previous pattern (core_uses_pid, '/'
// escaped in names), and the /proc parsing (environ, status). Each expectation is a value the
// kernel or man 5 core fixes; the end-to-end behaviour is core_handler_e2e_test's.
#include "harness/run/core_handler/core_handler.h"

#include <gtest/gtest.h>

namespace faultline::harness {
namespace {

const std::string handler = "/usr/local/libexec/faultline-core-handler";

crashed_process sample() {
  crashed_process p;
  p.pid = 42;
  p.host_pid = 4242;
  p.uid = 1000;
  p.gid = 100;
  p.signal = 11;
  p.limit_bytes = 1 << 20;
  p.time_s = 1700000000;
  p.comm = "fl_race_static";
  p.executable = "/opt/bin/fl_race_static_dtor";
  p.hostname = "box";
  return p;
}

TEST(core_handler_pattern, carries_the_previous_pattern_as_the_last_argument) {
  auto p = core_handler_pattern(handler, "core\n");
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(*p, "|/usr/local/libexec/faultline-core-handler %P %s %c %e core");
  auto parts = parse_core_handler_pattern(*p);
  ASSERT_TRUE(parts);
  EXPECT_EQ(parts->handler, handler);
  EXPECT_EQ(parts->previous, "core");
}

TEST(core_handler_pattern, doubles_the_previous_patterns_percent_so_the_kernel_leaves_it_alone) {
  auto p = core_handler_pattern(handler, "/var/crash/core.%e.%p.%t");
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(*p, "|/usr/local/libexec/faultline-core-handler %P %s %c %e /var/crash/core.%%e.%%p.%%t");
  auto parts = parse_core_handler_pattern(*p);
  ASSERT_TRUE(parts);
  EXPECT_EQ(parts->previous, "/var/crash/core.%e.%p.%t");
}

TEST(core_handler_pattern, installing_over_itself_keeps_the_original_previous_pattern) {
  auto first = core_handler_pattern(handler, "core.%p");
  ASSERT_TRUE(first);
  auto again = core_handler_pattern("/opt/faultline/bin/faultline-core-handler", *first);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(*again, "|/opt/faultline/bin/faultline-core-handler %P %s %c %e core.%%p");
  EXPECT_EQ(parse_core_handler_pattern(*again)->previous, "core.%p");
}

TEST(core_handler_pattern, refuses_another_collectors_pipe_and_names_it) {
  const std::string apport = "|/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -u%u -g%g -- %E";
  auto p = core_handler_pattern(handler, apport);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.code(), core::errc::invalid_argument);
  EXPECT_NE(p.error().message().find("core_pattern pipes cores to " + apport), std::string::npos) << p.error().message();
  auto socket = core_handler_pattern(handler, "@/run/systemd/coredump");
  ASSERT_FALSE(socket);
  EXPECT_NE(socket.error().message().find("socket"), std::string::npos) << socket.error().message();
}

TEST(core_handler_pattern, refuses_what_would_not_fit_in_core_pattern) {
  const std::string previous = "/var/crash/" + std::string(100, 'x') + "/core.%p";
  auto p = core_handler_pattern(handler, previous);
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message().find("core_pattern holds 127"), std::string::npos) << p.error().message();
  // Exactly 127 bytes fit.
  const std::string head = "|" + handler + " %P %s %c %e ";
  auto fits = core_handler_pattern(handler, std::string(core_pattern_max_bytes - head.size(), 'c'));
  ASSERT_TRUE(fits) << fits.error().message();
  EXPECT_EQ(fits->size(), core_pattern_max_bytes);
  auto over = core_handler_pattern(handler, std::string(core_pattern_max_bytes - head.size() + 1, 'c'));
  EXPECT_FALSE(over);
}

TEST(core_handler_pattern, refuses_white_space_empty_patterns_and_relative_handlers) {
  EXPECT_FALSE(core_handler_pattern(handler, "core dump"));
  EXPECT_FALSE(core_handler_pattern(handler, ""));
  EXPECT_FALSE(core_handler_pattern("bin/faultline-core-handler", "core"));
  EXPECT_FALSE(core_handler_pattern("/opt/my dir/faultline-core-handler", "core"));
  // Ours, but its previous pattern is unreadable: no guess.
  EXPECT_FALSE(core_handler_pattern(handler, "|" + handler + " %P"));
}

TEST(core_handler_pattern, parse_recognises_only_a_program_named_faultline_core_handler) {
  EXPECT_FALSE(parse_core_handler_pattern("core"));
  EXPECT_FALSE(parse_core_handler_pattern("|/usr/share/apport/apport -p%p"));
  EXPECT_FALSE(parse_core_handler_pattern("|/opt/not-faultline-core-handler %P %s %c %e core"));
  auto odd = parse_core_handler_pattern("|/opt/faultline-core-handler %p core");
  ASSERT_TRUE(odd);
  EXPECT_FALSE(odd->previous) << "an argv it did not write has no previous pattern to restore";
  auto lone_percent = parse_core_handler_pattern("|/opt/faultline-core-handler %P %s %c %e core.%p");
  ASSERT_TRUE(lone_percent);
  EXPECT_FALSE(lone_percent->previous) << "a single '%' was not written by install";
}

TEST(core_handler_args, parses_the_kernels_argv_and_joins_a_comm_split_on_spaces) {
  auto a = parse_core_handler_args({"faultline-core-handler", "4242", "11", "18446744073709551615", "fl_race", "core.%p"});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host_pid, 4242);
  EXPECT_EQ(a->signal, 11);
  EXPECT_EQ(a->limit_bytes, 18446744073709551615ull);
  EXPECT_EQ(a->comm, "fl_race");
  EXPECT_EQ(a->previous, "core.%p");
  auto split = parse_core_handler_args({"h", "7", "6", "0", "Web", "Content", "core"});
  ASSERT_TRUE(split);
  EXPECT_EQ(split->comm, "Web Content");
  EXPECT_EQ(split->previous, "core");
  EXPECT_FALSE(parse_core_handler_args({"h", "7", "6", "0", "core"}));
  EXPECT_FALSE(parse_core_handler_args({"h", "x7", "6", "0", "c", "core"}));
  EXPECT_FALSE(parse_core_handler_args({"h", "0", "6", "0", "c", "core"}));
  EXPECT_FALSE(parse_core_handler_args({"h", "7", "6", "-1", "c", "core"}));
}

TEST(expand_core_pattern, expands_like_the_kernels_file_pattern) {
  const auto p = sample();
  EXPECT_EQ(expand_core_pattern("core", p, false), "core");
  EXPECT_EQ(expand_core_pattern("core", p, true), "core.42") << "core_uses_pid appends the namespace pid";
  EXPECT_EQ(expand_core_pattern("core.%p", p, true), "core.42") << "no second pid when %p is there";
  EXPECT_EQ(expand_core_pattern("core.%P", p, true), "core.4242.42") << "%P does not count as %p";
  EXPECT_EQ(expand_core_pattern("/c/%e.%p.%P.%s.%u.%g.%t.%h.%c.%d", p, false),
            "/c/fl_race_static.42.4242.11.1000.100.1700000000.box.1048576.1");
  EXPECT_EQ(expand_core_pattern("%f|%E", p, false), "fl_race_static_dtor|!opt!bin!fl_race_static_dtor");
  EXPECT_EQ(expand_core_pattern("100%%.%i.%I", p, false), "100%.42.4242");
  EXPECT_EQ(expand_core_pattern("core.%Z.%", p, false), "core..") << "unknown specifiers and a last '%' give nothing";
}

TEST(expand_core_pattern, names_never_add_a_path_component) {
  auto p = sample();
  p.comm = "a/b";
  EXPECT_EQ(expand_core_pattern("core.%e", p, false), "core.a!b");
  p.comm = "..";
  EXPECT_EQ(expand_core_pattern("%e/core", p, false), "!./core");
  p.comm = "";
  EXPECT_EQ(expand_core_pattern("x/%e/core", p, false), "x/!/core");
}

TEST(environ_value, finds_the_first_exact_name) {
  using namespace std::string_view_literals;
  const auto env = "FAULTLINE_RUN_DIR_X=/no\0PATH=/bin\0FAULTLINE_RUN_DIR=/tmp/run/3\0FAULTLINE_RUN_DIR=/later\0"sv;
  EXPECT_EQ(environ_value(env, "FAULTLINE_RUN_DIR"), "/tmp/run/3");
  EXPECT_EQ(environ_value(env, "PATH"), "/bin");
  EXPECT_FALSE(environ_value(env, "HOME"));
  EXPECT_FALSE(environ_value(""sv, "PATH"));
  EXPECT_EQ(environ_value("A=\0"sv, "A"), "");
}

TEST(parse_proc_status, reads_ids_groups_and_the_innermost_pid) {
  const std::string status =
      "Name:\tfl_race\nPid:\t4242\nUid:\t1000\t1001\t1002\t1003\nGid:\t100\t101\t102\t103\n"
      "Groups:\t4 24 27 \nNSpid:\t4242\t17\n";
  auto ids = parse_proc_status(status);
  ASSERT_TRUE(ids);
  EXPECT_EQ(ids->uid, 1000u);
  EXPECT_EQ(ids->euid, 1001u);
  EXPECT_EQ(ids->fsuid, 1003u);
  EXPECT_EQ(ids->gid, 100u);
  EXPECT_EQ(ids->egid, 101u);
  EXPECT_EQ(ids->fsgid, 103u);
  EXPECT_EQ(ids->groups, (std::vector<gid_t>{4, 24, 27}));
  EXPECT_EQ(ids->ns_pid, 17);
  EXPECT_FALSE(parse_proc_status("Name:\tx\nGid:\t1\t1\t1\t1\n"));
  EXPECT_FALSE(parse_proc_status("Uid:\t1\t1\n"));
}

TEST(handler_core_path, is_core_dot_pid_in_the_run_directory) {
  EXPECT_EQ(handler_core_path("/tmp/out/runs/7", 1234), std::filesystem::path("/tmp/out/runs/7/core.1234"));
}

}  // namespace
}  // namespace faultline::harness
