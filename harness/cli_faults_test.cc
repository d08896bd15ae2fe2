// The agent and the command read one description of the grammar and the families
// (faults/families.h): for every spec item of a program's families, the preloaded agent's parser
// (agent::detail::item_understood, what plan_point enables) and the command's check before run 1
// (faults::parse, then check_agent_points) must accept and refuse the same items. Method: a list
// of items, accepted and refused, each asked of both sides.
#include "harness/cli_faults.h"

#include <gtest/gtest.h>

#include <string>

#include "faults/preload/detail/points.h"

namespace faultline::harness {
namespace {

bool command_accepts(const std::string& item) {
  auto parsed = faults::parse(item);
  if (!parsed) return false;
  try {
    check_agent_points(*parsed, spec_reader::program);
  } catch (const usage_error&) {
    return false;
  }
  return true;
}

bool agent_accepts(const std::string& item) { return agent::detail::item_understood(item.data(), item.size()); }

TEST(cli_faults, the_agent_and_the_command_accept_and_refuse_the_same_items) {
  const char* items[] = {
      // accepted
      "exit/end=delay(100ms)", "exit/start=1*kill", "exit/*=print", "exit/end=50%abort->stop",
      "process/start@python3=delay(5ms)", "spawn/parent=fail(EAGAIN)", "spawn/parent@sh*=2*fail",
      "lock/sem/wait=fail(EIO)", "lock/mutex/acquired@lock_shrreg=kill", "lock/file/release=delay(1ms)",
      "lock/*=fail(EIO)", "lock/sem/*=kill", "cuda/cuMemFree_v2=fail(CUDA_ERROR_LAUNCH_FAILED)",
      "cuda/cuMem*=teardown(device)", "cuda/cudaFree=teardown(0)", "cuda/*=fail", "fn/worker_step=stop",
      "posix/io/rw/write=1*fail(ENOSPC)", "libc/mm/malloc=fail", "exit/end=off",
      // refused: the family does not take the action, the filter, or the place
      "exit/end=fail", "exit/end=teardown(0)", "exit/end=pause(r)", "process/start=fail(EAGAIN)",
      "lock/sem/acquired=fail(EIO)", "lock/mutex/wait=pause(r)", "cuda/cudaFree=fail", "cuda/cuda*=fail",
      "cuda/cuMemFree_v2=pause(x)", "fn/worker_step=fail", "fn/worker_step@main=kill", "exit/end@prog=kill",
      "posix/io/rw/write=teardown(0)", "lock/sem/held=kill", "lock/bogus/wait=kill", "nosuch/x=kill",
      "exit/ned=kill", "spawn/child=kill", "lock/sem/wait=teardown(device)", "process/start=teardown(device)",
      // refused: the grammar
      "exit/end=kill()", "exit/end=delay", "exit/end=delay(5)", "exit/end=fial", "exit/end=0*kill",
      "exit/end=101%kill", "exit/end=kill->", "spawn/parent=fail(ENOPE)",
  };
  for (const char* item : items) {
    EXPECT_EQ(agent_accepts(item), command_accepts(item)) << item << ": agent " << (agent_accepts(item) ? "accepts" : "refuses");
  }
}

}  // namespace
}  // namespace faultline::harness
