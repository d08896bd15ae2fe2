// The cuda/ fault points of the preloaded agent (cuda_points.h) against a stand-in driver
// (testing/fake_libcuda.cc, built as libcuda.so.1): a program that loads it as the CUDA runtime
// does (testing/cuda_points_child.cc) runs with libfaultline_agent.so preloaded.
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "faults/preload/testing/preload_run.h"

namespace faultline::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string child_program = FAULTLINE_CUDA_POINTS_CHILD;
const std::string fake_driver = FAULTLINE_FAKE_LIBCUDA;
const std::string preload_library = FAULTLINE_AGENT_PRELOAD;

using testing::finished;
using testing::slurp;

class cuda_points : public ::testing::Test {
 protected:
  finished run(const std::string& spec, const std::vector<std::string>& steps) {
    std::vector<std::string> args{child_program, fake_driver};
    args.insert(args.end(), steps.begin(), steps.end());
    finished f = runner_.run(spec, args);
    pid_ = f.pid;
    return f;
  }

  std::string reached() const { return runner_.reached(pid_); }

  testing::preload_runner runner_{preload_library};
  const fs::path& dir_ = runner_.dir();
  pid_t pid_ = 0;
};

using testing::exited_0;

TEST_F(cuda_points, without_a_cuda_item_every_call_reaches_the_driver) {
  auto f = run("exit/end=off", {"free", "free-direct", "many", "report"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "free rc=0\nfree-direct rc=0\nmany rc=0\nfake: frees=2 last=0x5678 resets=0 reset_device=-1 many=359.0\n");
}

// A program that preloads its own dlsym after the agent (HAMi-core's libvgpu.so does) keeps it:
// the agent passes every lookup it does not replace on to the next dlsym, not to glibc's.
TEST(cuda_points_dlsym, a_later_preloads_dlsym_still_answers_with_or_without_cuda_items) {
  testing::preload_runner r(preload_library + ":" + FAULTLINE_DLSYM_INTERPOSER);
  for (const char* spec : {"exit/end=off", "cuda/cuMemFree_v2=fail(CUDA_ERROR_INVALID_VALUE)"}) {
    auto f = r.run(spec, {child_program, fake_driver, "interposed", "free"});
    ASSERT_TRUE(exited_0(f)) << spec << ": " << f.err;
    EXPECT_EQ(f.out, std::string("interposed yes\nfree rc=") + (spec[0] == 'c' ? "1" : "0") + "\n") << spec;
  }
}

TEST_F(cuda_points, fail_answers_the_error_without_calling_the_driver) {
  auto f = run("cuda/cuMemFree_v2=fail(CUDA_ERROR_INVALID_VALUE)", {"free", "free-direct", "alloc", "report"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "free rc=1\nfree-direct rc=1\nalloc rc=0 ptr=0x100040\n"
                   "fake: frees=0 last=0x0 resets=0 reset_device=-1 many=0.0\n");
  EXPECT_EQ(reached(), "cuda/cuMemFree_v2\n");  // once per process, whatever the number of hits
}

TEST_F(cuda_points, the_name_asked_of_cuGetProcAddress_counts_are_kept) {
  auto f = run("cuda/cuMemFree=2*fail(700)", {"free", "free", "free", "report"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "free rc=700\nfree rc=700\nfree rc=0\nfake: frees=1 last=0x1234 resets=0 reset_device=-1 many=0.0\n");
}

TEST_F(cuda_points, a_stub_passes_stack_and_vector_arguments_through) {
  auto f = run("cuda/cuMany*=print", {"many", "report"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "many rc=0\nfake: frees=0 last=0x0 resets=0 reset_device=-1 many=359.0\n");
  EXPECT_NE(f.err.find("fault point cuda/cuManyArgs_v2 reached (injected: print)"), std::string::npos) << f.err;
  EXPECT_EQ(reached(), "cuda/cuMany*\n");
}

TEST_F(cuda_points, teardown_resets_the_current_device_and_the_call_goes_on) {
  auto f = run("cuda/cuMemFree_v2=teardown(device)", {"device=3", "free", "report"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "free rc=0\nfake: frees=1 last=0x1234 resets=1 reset_device=3 many=0.0\n");
  auto g = run("cuda/cuMemFree_v2=teardown(1)", {"device=3", "free", "report"});
  EXPECT_EQ(g.out, "free rc=0\nfake: frees=1 last=0x1234 resets=1 reset_device=1 many=0.0\n");
}

TEST_F(cuda_points, delay_and_kill_act_before_the_call) {
  auto slow = run("cuda/cuMemAlloc_v2=delay(300ms)", {"alloc"});
  ASSERT_TRUE(exited_0(slow)) << slow.err;
  EXPECT_GE(slow.took, 300ms);
  auto killed = run("cuda/cuMemFree_v2=kill", {"alloc", "free", "report"});
  ASSERT_TRUE(WIFSIGNALED(killed.status)) << killed.err;
  EXPECT_EQ(WTERMSIG(killed.status), SIGKILL);
  EXPECT_EQ(killed.out, "alloc rc=0 ptr=0x100040\n");
  EXPECT_EQ(reached(), "cuda/cuMemFree_v2\n");
}

TEST_F(cuda_points, an_item_naming_no_call_made_is_never_reached) {
  auto f = run("cuda/cuNoSuchCall=fail;cuda/cuMemFree_v2=off", {"free", "report"});
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "free rc=0\nfake: frees=1 last=0x1234 resets=0 reset_device=-1 many=0.0\n");
  EXPECT_EQ(reached(), "cuda/cuMemFree_v2\n");
}

// Through `faultline exec`: the CLI takes the spec, the preloaded agent acts, the run is
// classified, and the item no run reached is named.
TEST_F(cuda_points, faultline_exec_runs_them_and_names_items_never_reached) {
  const std::string out = (dir_ / "campaign").string();
  const std::string cmd = std::string(FAULTLINE_CLI) + " exec --json --repeat 2 --out " + out +
                          " --faults 'cuda/cuMemFree_v2=kill;cuda/cuMemsetD8_v2=fail' -- " + child_program + " " +
                          fake_driver + " alloc free > " + (dir_ / "summary.json").string() + " 2>/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);  // the runs failed
  const std::string summary = slurp(dir_ / "summary.json");
  EXPECT_NE(summary.find("SIGKILL"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"crash\":2"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"points_never_reached\":[\"cuda/cuMemsetD8_v2\"]"), std::string::npos) << summary;
}

// --late-cuda: every driver function gets a stub that, once main has returned, calls it and records
// a call answered CUDA_ERROR_DEINITIALIZED (which the real driver does not report to CUPTI).
class late_driver_calls : public cuda_points {
 protected:
  finished run_late(const std::string& spec, const std::vector<std::string>& steps, const std::string& late = "") {
    std::vector<std::string> args{child_program, fake_driver};
    args.insert(args.end(), steps.begin(), steps.end());
    std::vector<std::string> env{"CUDA_INJECTION64_PATH=" + preload_library};
    if (!late.empty()) env.push_back("FAULTLINE_LATE_CUDA=" + late);
    finished f = runner_.run(spec, args, env);
    pid_ = f.pid;
    return f;
  }
  std::string late_calls() const {
    const fs::path file = dir_ / ("late-cuda." + std::to_string(pid_));
    std::string calls;
    std::error_code ec;
    if (!fs::exists(file, ec)) return calls;
    std::istringstream in(slurp(file));
    for (std::string line; std::getline(in, line);)
      if (line.rfind("call ", 0) == 0) calls += line + "\n";
    return calls;
  }
};

const std::vector<std::string> late_steps = {"deinit", "free", "at-exit", "many", "alloc", "free", "report"};

TEST_F(late_driver_calls, after_main_a_deinitialized_answer_is_recorded_and_arguments_pass_through) {
  auto f = run_late("", late_steps);
  ASSERT_TRUE(exited_0(f)) << f.err;
  // In main, the answer is not looked at; at exit the call is made (every argument passed on,
  // the stack ones too), its result returned, and the late one recorded with its frames.
  EXPECT_EQ(f.out, "free rc=4\nmany rc=0\nalloc rc=0 ptr=0x100040\nfree rc=4\n"
                   "fake: frees=0 last=0x0 resets=0 reset_device=-1 many=359.0\n");
  EXPECT_EQ(late_calls(), "call cuMemFree_v2 4\n");
  const std::string record = slurp(dir_ / ("late-cuda." + std::to_string(pid_)));
  // The caller's frames follow: the unwinder passes through the stub's trampoline to the child.
  EXPECT_NE(record.find(fs::path(child_program).filename().string() + "+0x"), std::string::npos) << record;
}

TEST_F(late_driver_calls, an_item_still_acts_at_exit_beside_the_check) {
  auto f = run_late("cuda/cuMemAlloc_v2=fail(700)", late_steps);
  ASSERT_TRUE(exited_0(f)) << f.err;
  EXPECT_EQ(f.out, "free rc=4\nmany rc=0\nalloc rc=700 ptr=0x0\nfree rc=4\n"
                   "fake: frees=0 last=0x0 resets=0 reset_device=-1 many=359.0\n");
  EXPECT_EQ(late_calls(), "call cuMemFree_v2 4\n");
}

TEST_F(late_driver_calls, nothing_is_watched_when_late_cuda_is_off_or_not_asked_for) {
  auto off = run_late("", late_steps, "0");
  ASSERT_TRUE(exited_0(off)) << off.err;
  EXPECT_EQ(late_calls(), "");
  auto plain = run("", late_steps);  // no CUDA_INJECTION64_PATH: no --late-cuda
  ASSERT_TRUE(exited_0(plain)) << plain.err;
  EXPECT_EQ(late_calls(), "");
}

// Through `faultline exec --late-cuda`: the run fails at exit, signed with the driver call and the
// program's frame that made it.
TEST_F(late_driver_calls, faultline_exec_fails_the_run_with_the_call_and_its_caller) {
  const std::string out = (dir_ / "campaign").string();
  std::string cmd = std::string(FAULTLINE_CLI) + " exec --json --late-cuda --out " + out + " -- " + child_program + " " +
                    fake_driver;
  for (const auto& s : late_steps) cmd += " " + s;
  cmd += " > " + (dir_ / "summary.json").string() + " 2>/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string summary = slurp(dir_ / "summary.json");
  EXPECT_NE(summary.find("\"fail\":1"), std::string::npos) << summary;
  EXPECT_NE(summary.find("late-cuda: cuMemFree_v2 \u2190 "), std::string::npos) << summary;
  EXPECT_NE(summary.find("run_steps"), std::string::npos) << summary;
}

}  // namespace
}  // namespace faultline::agent
