// `faultline cores` (cores_cli.h) without changing core_pattern: --install and --remove exclude
// each other, --handler needs --install, and without a flag the command shows where
// core_pattern stands. Installing for real is core_handler_e2e_test's (root).
#include "harness/cores_cli.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <sstream>

namespace faultline::harness {
namespace {

TEST(cores_command, install_and_remove_exclude_each_other) {
  CLI::App app;
  cores_options o;
  add_cores_command(app, o);
  EXPECT_THROW(app.parse(std::vector<std::string>{"--remove", "--install", "cores"}), CLI::ParseError);
  std::ostringstream out, err;
  cores_options both;
  both.install = both.remove = true;
  EXPECT_EQ(cores_command(both, out, err), 2);
  EXPECT_NE(err.str().find("exclude each other"), std::string::npos) << err.str();
  cores_options handler_alone;
  handler_alone.handler = "/x/faultline-core-handler";
  EXPECT_EQ(cores_command(handler_alone, out, err), 2);
}

TEST(cores_command, without_a_flag_shows_core_pattern) {
  std::ostringstream out, err;
  EXPECT_EQ(cores_command({}, out, err), 0) << err.str();
  EXPECT_EQ(out.str().rfind("core_pattern: ", 0), 0u) << out.str();
  EXPECT_NE(out.str().find("faultline-core-handler: "), std::string::npos) << out.str();
}

}  // namespace
}  // namespace faultline::harness
