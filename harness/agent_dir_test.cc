// Agent directories (agent_dir.h): the verdicts faultline gives processes it did not start.
//
// Goal: `agent-report` says of a directory what a classified run would say of its processes —
// each crash with its pid, signal, phase and classify()'s signature, late CUDA calls grouped per
// API with classify()'s signature, the spec items reached and never reached — and exits 1 exactly
// when a crash or a late call is there; `agent-env` prints the agent's environment, refuses what
// `exec --faults` refuses and creates nothing then. Method: synthetic run directories in the
// agent's file formats (faults/preload/protocol.h), the commands driven in-process through
// run_cli, and one end-to-end test: the `faultline` binary's agent-env, a real crashing program
// started with that environment (not by faultline), then agent-report.
#include "harness/agent_dir.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "faults/preload/phase_table.h"
#include "harness/cli.h"
#include "harness/run/phases.h"
#include "harness/run/process.h"
#include "harness/tests/e2e_util.h"

// A function, and 63 bytes after it that no symbol covers (as the stripped internals of a static
// CUDA runtime inside a library are): addr2line names them after the function all the same.
extern "C" void fl_agent_dir_named();
asm(R"(
    .text
    .p2align 4
    .globl fl_agent_dir_named
    .type fl_agent_dir_named, @function
fl_agent_dir_named:
    ret
    .size fl_agent_dir_named, 1
    .skip 63, 0xcc
)");

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;

class agent_dir : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_.path() / name) << text; }
  fs::path path() const { return dir_.path(); }

  struct cli_result {
    int status;
    std::string out, err;
  };
  static cli_result cli(std::vector<std::string> args) {
    args.insert(args.begin(), "faultline");
    std::ostringstream out, err;
    cli_context ctx{out, err};
    const int status = run_cli(args, ctx);
    return {status, out.str(), err.str()};
  }

  testing::scratch_dir dir_;
};

constexpr const char* crash_text =
    "signal 11 SIGSEGV\n"
    "thread 1234 main\n"
    "#0 0x55d4c3a1b2c0 /opt/app/bin/prog+0x12c0 pool::release(void*)\n"
    "#1 0x55d4c3a1b300 /opt/app/bin/prog+0x1300 _ZN4pool7destroyEv\n"
    "#2 0x7f0000001000 /lib/x86_64-linux-gnu/libc.so.6+0x1000 __run_exit_handlers\n"
    "#3 0x7f0000002000 /lib/x86_64-linux-gnu/libc.so.6+0x2000 exit\n"
    "#4 0x55d4c3a1b500 /opt/app/bin/prog+0x1500 main\n";

constexpr const char* abort_text =
    "signal 6 SIGABRT\n"
    "thread 1240 worker\n"
    "#0 0x7f0000003000 /lib/x86_64-linux-gnu/libc.so.6+0x3000 raise\n"
    "#1 0x7f0000004000 /lib/x86_64-linux-gnu/libc.so.6+0x4000 abort\n"
    "#2 0x55d4c3a1b600 /opt/app/bin/worker+0x1600 check_invariant()\n"
    "#3 0x55d4c3a1b700 /opt/app/bin/worker+0x1700 main\n";

constexpr const char* late_cuda_text =
    "call cudaEventSynchronize 4\n"
    "#0 0x7f0000010000 /opt/lib/libfaultline_agent.so+0x10000 faultline::agent::record_late_cuda(char const*, int)\n"
    "#1 0x7f0000030000 /opt/app/lib/librmm.so+0x30000 cudaEventSynchronize\n"
    "#2 0x7f0000040000 /opt/app/lib/librmm.so+0x40000 rmm::mr::pool_memory_resource::release()\n"
    "#3 0x7f0000050000 /opt/app/bin/client+0x500 pool_holder::~pool_holder()\n"
    "\n"
    "call cuEventDestroy_v2 4\n"
    "#0 0x7f0000010000 /opt/lib/libfaultline_agent.so+0x10000 faultline::agent::record_late_cuda(char const*, int)\n"
    "#1 0x7f0000050100 /opt/app/bin/client+0x600 pool_holder::~pool_holder()\n"
    "\n"
    // CUDA's own teardown (the static runtime inside the program, then libc's exit): not the
    // program's call.
    "call cuDevicePrimaryCtxRelease 4\n"
    "#0 0x7f0000010000 /opt/lib/libfaultline_agent.so+0x10000 faultline::agent::record_late_cuda(char const*, int)\n"
    "#1 0x7f0000010100 /opt/lib/libfaultline_agent.so+0x10100 faultline_cuda_result\n"
    "#2 0x7f0000050200 /opt/app/bin/client+0x700 libcudart_static_4d8b33a106dceb3c6e1a3a6ff5a2c8d7\n"
    "#3 0x7f0000001000 /lib/x86_64-linux-gnu/libc.so.6+0x1000 __run_exit_handlers\n"
    "#4 0x7f0000002000 /lib/x86_64-linux-gnu/libc.so.6+0x2000 exit\n"
    "\n"
    // The same from a library's destructor (the runtime linked into librmm.so): what called the
    // C library's __cxa_finalize is exit plumbing, not the call's maker.
    "call cuDevicePrimaryCtxRelease 4\n"
    "#0 0x7f0000010000 /opt/lib/libfaultline_agent.so+0x10000 faultline::agent::record_late_cuda(char const*, int)\n"
    "#1 0x7f0000070000 /opt/app/lib/librmm.so+0x827c9 libcudart_static_4d8b33a106dceb3c6e1a3a6ff5a2c8d7\n"
    "#2 0x7f0000003000 /lib/x86_64-linux-gnu/libc.so.6+0x3000 __cxa_finalize\n"
    "#3 0x7f0000071000 /opt/app/lib/librmm.so+0x23677 ??\n"
    "\n";

TEST_F(agent_dir, reports_each_crash_with_its_pid_signal_phase_and_classify_signature) {
  write("crash.1234", crash_text);
  write("phase.1234", "run\nmain-returned\nexit\n");
  write("crash.1240", abort_text);
  write("phase.1240", "run\n");
  write("phase.1300", "run\n");  // a process that ended well
  auto f = read_agent_dir(path());
  ASSERT_TRUE(f) << f.error().message();
  ASSERT_EQ(f->crashes.size(), 2u);
  std::map<pid_t, agent_crash> by_pid;
  for (const auto& c : f->crashes) by_pid[c.pid] = c;
  EXPECT_EQ(by_pid[1234].signal, SIGSEGV);
  EXPECT_EQ(by_pid[1234].thread, 1234);
  EXPECT_EQ(by_pid[1234].when, phase::exit);
  EXPECT_EQ(by_pid[1234].signature, "SIGSEGV: pool::release | pool::destroy | main");
  EXPECT_EQ(by_pid[1240].signal, SIGABRT);
  EXPECT_EQ(by_pid[1240].when, phase::run);
  EXPECT_EQ(by_pid[1240].signature, "SIGABRT: check_invariant | main");
  EXPECT_EQ(f->processes, 3u);
  EXPECT_TRUE(f->found());
}

TEST_F(agent_dir, reads_markers_from_the_phase_table_too) {
  ASSERT_TRUE(reset_phase_table(path()));  // what agent-env makes; the agent claims a slot
  {
    std::fstream table(path() / agent::phase_table_file, std::ios::in | std::ios::out | std::ios::binary);
    agent::phase_table_header header{};
    table.read(reinterpret_cast<char*>(&header), sizeof header);
    header.next = 1;
    table.seekp(0);
    table.write(reinterpret_cast<const char*>(&header), sizeof header);
    agent::phase_slot slot{};
    slot.pid = 1234;
    const std::string markers = "run\nexit\n";
    slot.used = static_cast<std::uint32_t>(markers.size());
    markers.copy(slot.markers, markers.size());
    table.seekp(agent::phase_slot_bytes);
    table.write(reinterpret_cast<const char*>(&slot), sizeof slot);
  }
  write("crash.1234", crash_text);
  auto f = read_agent_dir(path());
  ASSERT_TRUE(f);
  ASSERT_EQ(f->crashes.size(), 1u);
  EXPECT_EQ(f->crashes[0].when, phase::exit);
  EXPECT_EQ(f->processes, 1u);
}

// A driver call none of whose frames is the program's own is CUDA's exit teardown: not listed.
TEST_F(agent_dir, groups_late_cuda_calls_per_api_with_counts_pids_and_signature) {
  write("late-cuda.1000", late_cuda_text);
  write("late-cuda.1001", "call cudaEventSynchronize 4\n");  // past the framed calls: no frames
  auto f = read_agent_dir(path());
  ASSERT_TRUE(f);
  ASSERT_EQ(f->late_cuda.size(), 2u);
  const auto& destroy = f->late_cuda[0];
  const auto& sync = f->late_cuda[1];
  EXPECT_EQ(destroy.api, "cuEventDestroy_v2");
  EXPECT_EQ(destroy.calls, 1u);
  EXPECT_EQ(destroy.pids, (std::vector<pid_t>{1000}));
  EXPECT_EQ(destroy.signature, "late-cuda: cuEventDestroy_v2 \u2190 pool_holder::~pool_holder");
  EXPECT_EQ(sync.api, "cudaEventSynchronize");
  EXPECT_EQ(sync.calls, 2u);
  EXPECT_EQ(sync.pids, (std::vector<pid_t>{1000, 1001}));
  EXPECT_EQ(sync.signature, "late-cuda: cudaEventSynchronize \u2190 cudaEventSynchronize | rmm::mr::pool_memory_resource::release");
  EXPECT_TRUE(f->crashes.empty());
  EXPECT_TRUE(f->found());
}

// Frames the agent could not name, in a real module: the harness names them (addr2line), except
// where no function symbol covers the address; a driver call made only from such code is CUDA's.
TEST_F(agent_dir, a_late_driver_call_from_code_no_symbol_covers_is_not_the_programs) {
  Dl_info info{};
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(&fl_agent_dir_named), &info), 0);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const auto at = reinterpret_cast<std::uintptr_t>(reinterpret_cast<void*>(&fl_agent_dir_named)) -
                  reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  auto frame_line = [&](int n, std::uintptr_t offset) {
    std::ostringstream line;
    line << "#" << n << " 0x7f0000060000 " << self << "+0x" << std::hex << offset << " ??\n";
    return line.str();
  };
  const std::string agent = "#0 0x7f0000010000 /opt/lib/libfaultline_agent.so+0x10000 faultline_cuda_result\n";
  const std::string exit_frames = "#3 0x7f0000001000 /lib/x86_64-linux-gnu/libc.so.6+0x1000 __run_exit_handlers\n";
  // Return addresses: the harness looks up the byte before each.
  write("late-cuda.2000", "call cuDevicePrimaryCtxRelease 4\n" + agent + frame_line(1, at + 20) +
                              frame_line(2, at + 40) + exit_frames + "\ncall cuCtxGetId 4\n" + agent +
                              frame_line(1, at + 1) + exit_frames + "\n");
  auto f = read_agent_dir(path());
  ASSERT_TRUE(f);
  ASSERT_EQ(f->late_cuda.size(), 1u);
  EXPECT_EQ(f->late_cuda[0].api, "cuCtxGetId");
  EXPECT_EQ(f->late_cuda[0].signature, "late-cuda: cuCtxGetId \u2190 fl_agent_dir_named");
}

TEST_F(agent_dir, lists_points_reached_once_and_the_spec_items_never_reached) {
  write("points.10", "exit/end\nsim/*\n");
  write("points.11", "exit/end\n");
  write(agent_env_file, R"({"faults":"exit/end=kill;sim/*=off;exit/start=print","seed":1,"late_cuda":false})");
  auto f = read_agent_dir(path());
  ASSERT_TRUE(f);
  EXPECT_EQ(f->points_reached, (std::vector<std::string>{"exit/end", "sim/*"}));
  ASSERT_TRUE(f->points_never_reached);
  EXPECT_EQ(*f->points_never_reached, (std::vector<std::string>{"exit/start"}));
  EXPECT_FALSE(f->found()) << "reaching points is no finding";
}

TEST_F(agent_dir, report_exits_zero_for_nothing_one_for_a_finding_two_for_a_missing_dir) {
  write("phase.77", "run\nmain-returned\nexit\n");
  auto clean = cli({"agent-report", path().string()});
  EXPECT_EQ(clean.status, exit_ok) << clean.err;
  EXPECT_NE(clean.out.find("1 process carried the agent; 0 crashes"), std::string::npos) << clean.out;

  write("crash.1234", crash_text);
  write("late-cuda.1000", late_cuda_text);
  auto found = cli({"agent-report", path().string()});
  EXPECT_EQ(found.status, exit_failed);
  EXPECT_NE(found.out.find("crash: pid 1234, SIGSEGV, phase run: SIGSEGV: pool::release | pool::destroy | main\n"),
            std::string::npos)
      << found.out;
  EXPECT_NE(found.out.find("late CUDA call: cudaEventSynchronize x1 (pid 1000), phase exit: late-cuda: cudaEventSynchronize"),
            std::string::npos)
      << found.out;

  auto missing = cli({"agent-report", (path() / "nowhere").string()});
  EXPECT_EQ(missing.status, exit_usage);
  EXPECT_NE(missing.err.find("nowhere: no such directory"), std::string::npos) << missing.err;
}

// "0 crashes" of a directory no agent-carrying process wrote into would be a false all-clear.
TEST_F(agent_dir, report_of_a_directory_holding_no_agent_records_is_an_error) {
  auto empty = cli({"agent-report", path().string()});
  EXPECT_EQ(empty.status, exit_usage) << empty.out;
  EXPECT_NE(empty.err.find(path().string() + " holds no agent records"), std::string::npos) << empty.err;
  EXPECT_EQ(empty.out.find("0 crashes"), std::string::npos) << empty.out;

  write("notes.txt", "not the agent's\n");
  auto other = cli({"agent-report", path().string(), "--json"});
  EXPECT_EQ(other.status, exit_usage) << other.out;
  EXPECT_TRUE(other.out.empty()) << other.out;

  // Prepared by agent-env, but no process started with its variables yet.
  const fs::path prepared = path() / "prepared";
  ASSERT_EQ(cli({"agent-env", "--run-dir", prepared.string()}).status, exit_ok);
  auto unused = cli({"agent-report", prepared.string()});
  EXPECT_EQ(unused.status, exit_usage) << unused.out;
  EXPECT_NE(unused.err.find("no process carried the agent into it"), std::string::npos) << unused.err;
}

TEST_F(agent_dir, report_json_has_every_finding) {
  write("crash.1234", crash_text);
  write("phase.1234", "run\n");
  write("late-cuda.1000", late_cuda_text);
  write("points.1234", "exit/end\n");
  auto r = cli({"agent-report", path().string(), "--json"});
  EXPECT_EQ(r.status, exit_failed);
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["crashes"].size(), 1u);
  EXPECT_EQ(j["crashes"][0]["pid"], 1234);
  EXPECT_EQ(j["crashes"][0]["signal"]["name"], "SIGSEGV");
  EXPECT_EQ(j["crashes"][0]["signal"]["number"], SIGSEGV);
  EXPECT_EQ(j["crashes"][0]["phase"], "run");
  EXPECT_EQ(j["crashes"][0]["signature"], "SIGSEGV: pool::release | pool::destroy | main");
  ASSERT_EQ(j["late_cuda"].size(), 2u);
  EXPECT_EQ(j["late_cuda"][1]["api"], "cudaEventSynchronize");
  EXPECT_EQ(j["late_cuda"][1]["calls"], 1);
  EXPECT_EQ(j["late_cuda"][1]["phase"], "exit");
  EXPECT_EQ(j["points_reached"], nlohmann::json::array({"exit/end"}));
  EXPECT_TRUE(j["points_never_reached"].is_null()) << "no agent-env.json: the spec is unknown";
}

TEST_F(agent_dir, preload_environment_puts_the_agent_first_and_refuses_a_second_injection_library) {
  auto v = preload_environment("/b/lib/libfaultline_agent.so", {"LD_PRELOAD=/x/libprev.so"}, false);
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, (std::vector<env_var>{{"LD_PRELOAD", "/b/lib/libfaultline_agent.so:/x/libprev.so"}}));
  auto cuda = preload_environment("/b/lib/libfaultline_agent.so", {"LD_PRELOAD="}, true);
  ASSERT_TRUE(cuda);
  EXPECT_EQ(*cuda, (std::vector<env_var>{{"LD_PRELOAD", "/b/lib/libfaultline_agent.so"},
                                         {"CUDA_INJECTION64_PATH", "/b/lib/libfaultline_agent.so"}}));
  auto refused = preload_environment("/b/lib/libfaultline_agent.so", {"CUDA_INJECTION64_PATH=/t/libtool.so"}, true);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("--late-cuda: CUDA_INJECTION64_PATH is set already"), std::string::npos);
}

TEST_F(agent_dir, cuda_runtime_points_make_the_agent_the_injection_library_without_watching_late_calls) {
  auto points = preload_environment("/b/lib/libfaultline_agent.so", {}, false, true);
  ASSERT_TRUE(points);
  EXPECT_EQ(*points, (std::vector<env_var>{{"LD_PRELOAD", "/b/lib/libfaultline_agent.so"},
                                           {"CUDA_INJECTION64_PATH", "/b/lib/libfaultline_agent.so"},
                                           {"FAULTLINE_LATE_CUDA", "0"}}));
  auto both = preload_environment("/b/lib/libfaultline_agent.so", {}, true, true);
  ASSERT_TRUE(both);
  EXPECT_EQ(both->size(), 2u) << "late calls watched: no FAULTLINE_LATE_CUDA=0";
  auto refused = preload_environment("/b/lib/libfaultline_agent.so", {"CUDA_INJECTION64_PATH=/t/libtool.so"}, false, true);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("--faults (cuda/cuda... points): CUDA_INJECTION64_PATH"), std::string::npos);

  // The command finds them in the spec as exec does.
  auto r = cli({"agent-env", "--run-dir", (path() / "run").string(), "--faults", "cuda/cudaFree=delay(1ms)", "--json"});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["CUDA_INJECTION64_PATH"], agent_library().string());
  EXPECT_EQ(j["FAULTLINE_LATE_CUDA"], "0");
}

TEST_F(agent_dir, env_json_names_every_variable_and_makes_the_directory_with_its_phase_table) {
  const fs::path run = path() / "a" / "run";
  auto r = cli({"agent-env", "--run-dir", run.string(), "--faults", "exit/end=kill", "--seed", "42", "--json"});
  ASSERT_EQ(r.status, exit_ok) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const std::string agent = agent_library().string();
  const char* prev = std::getenv("LD_PRELOAD");
  EXPECT_EQ(j["LD_PRELOAD"], prev && *prev ? agent + ":" + prev : agent);
  EXPECT_EQ(j["FAULTLINE_RUN_DIR"], run.string());
  EXPECT_EQ(j["FAULTLINE_FAULTS"], "exit/end=kill");
  EXPECT_EQ(j["FAULTLINE_SEED"], "42");
  EXPECT_EQ(j["FAULTLINE_AGENT_CRASH"], "report");
  EXPECT_EQ(j["FAULTLINE_AGENT_QUIET"], "1");
  EXPECT_FALSE(j.contains("CUDA_INJECTION64_PATH"));
  EXPECT_EQ(j.size(), 6u);
  EXPECT_TRUE(fs::is_regular_file(agent)) << agent;
  EXPECT_EQ(fs::file_size(run / agent::phase_table_file), agent::phase_table_bytes);
  EXPECT_TRUE(fs::exists(run / agent_env_file));

  // Shell lines, quoted where the shell needs it; a second batch needs a new directory.
  auto lines = cli({"agent-env", "--run-dir", (path() / "b").string(), "--faults", "exit/end=delay(5ms);spawn/parent=off", "--late-cuda"});
  ASSERT_EQ(lines.status, exit_ok) << lines.err;
  EXPECT_NE(lines.out.find("\nFAULTLINE_FAULTS='exit/end=delay(5ms);spawn/parent=off'\n"), std::string::npos) << lines.out;
  EXPECT_NE(lines.out.find("\nCUDA_INJECTION64_PATH=" + agent + "\n"), std::string::npos) << lines.out;
  auto again = cli({"agent-env", "--run-dir", run.string()});
  EXPECT_EQ(again.status, exit_usage);
  EXPECT_NE(again.err.find("already holds agent files"), std::string::npos) << again.err;
}

TEST_F(agent_dir, env_refuses_what_exec_refuses_and_creates_nothing) {
  const fs::path run = path() / "run";
  for (const std::string spec : {"exit/end=fail", "sim/alloc=fial", "exit/*=teardown(0)"}) {
    auto r = cli({"agent-env", "--run-dir", run.string(), "--faults", spec});
    EXPECT_EQ(r.status, exit_usage) << spec;
    EXPECT_NE(r.err.find("faultline: error: --faults: "), std::string::npos) << r.err;
    // exec says the same of the same spec.
    auto exec = cli({"exec", "--faults", spec, "--out", (path() / "out").string(), "--", "/bin/true"});
    EXPECT_EQ(exec.status, exit_usage);
    EXPECT_EQ(exec.err.substr(0, exec.err.find('\n')), r.err.substr(0, r.err.find('\n')));
    EXPECT_FALSE(fs::exists(run)) << spec;
  }
  auto seed = cli({"agent-env", "--run-dir", run.string(), "--seed", "-1"});
  EXPECT_EQ(seed.status, exit_usage);
  EXPECT_NE(seed.err.find("--seed '-1'"), std::string::npos) << seed.err;
  auto no_dir = cli({"agent-env", "--faults", "exit/end=kill"});
  EXPECT_EQ(no_dir.status, exit_usage);
  EXPECT_FALSE(fs::exists(run));
}

TEST_F(agent_dir, env_refuses_late_cuda_beside_another_injection_library_and_creates_nothing) {
  agent_env_request r;
  r.run_dir = path() / "run";
  r.agent = agent_library();
  r.late_cuda = true;
  r.base = {"CUDA_INJECTION64_PATH=/opt/tool/libinject.so"};
  auto v = prepare_agent_dir(r);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.code(), core::errc::invalid_argument);
  EXPECT_FALSE(fs::exists(r.run_dir));
  r.late_cuda = false;
  r.agent = path() / "lib" / "libfaultline_agent.so";  // not there
  auto missing = prepare_agent_dir(r);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("is missing"), std::string::npos);
  EXPECT_FALSE(fs::exists(r.run_dir));
}

// --- end to end: the faultline binary, and programs it does not start ---------------------------

// Runs `argv` under the environment agent-env printed (on top of this process's), with no core
// file left behind.
tool_output run_with(const nlohmann::json& vars, const std::vector<std::string>& argv) {
  auto env = current_environment();
  for (const auto& [k, v] : vars.items()) set_env(env, k, v.get<std::string>());
  std::vector<std::string> sh = {"/bin/sh", "-c", "ulimit -c 0; exec \"$@\"", "sh"};
  sh.insert(sh.end(), argv.begin(), argv.end());
  auto r = run_tool(sh, std::chrono::seconds(60), env, true);
  EXPECT_TRUE(r) << r.error().message();
  return r ? *r : tool_output{};
}

TEST_F(agent_dir, e2e_a_program_started_with_agent_env_is_reported_crashed) {
  const fs::path run = path() / "run";
  auto env = testing::run_faultline({"agent-env", "--run-dir", run.string(), "--json"});
  ASSERT_EQ(env.status, 0) << env.err;
  auto vars = nlohmann::json::parse(env.out);
  EXPECT_EQ(vars["LD_PRELOAD"].get<std::string>().rfind(testing::agent_preload().string(), 0), 0u) << vars.dump();

  auto crashed = run_with(vars, {testing::program("fl_testdata_crash_in_work").string()});
  ASSERT_TRUE(WIFSIGNALED(crashed.status)) << crashed.status;
  EXPECT_EQ(WTERMSIG(crashed.status), SIGSEGV);
  auto passed = run_with(vars, {testing::program("fl_testdata_pass").string()});
  EXPECT_TRUE(WIFEXITED(passed.status) && WEXITSTATUS(passed.status) == 0) << passed.status;

  auto report = testing::run_faultline({"agent-report", run.string(), "--json"});
  EXPECT_EQ(report.status, 1) << report.err;
  auto j = nlohmann::json::parse(report.out);
  ASSERT_EQ(j["crashes"].size(), 1u) << j.dump();
  EXPECT_EQ(j["crashes"][0]["signal"]["name"], "SIGSEGV");
  EXPECT_EQ(j["crashes"][0]["phase"], "run");
  EXPECT_EQ(j["crashes"][0]["signature"], "SIGSEGV: crash_in_work_frame | main");
  EXPECT_EQ(j["processes"], 2) << "both programs carried the agent";
}

TEST_F(agent_dir, e2e_an_exit_point_killed_process_is_no_crash_but_its_point_is_reached) {
  const fs::path run = path() / "run";
  auto env = testing::run_faultline({"agent-env", "--run-dir", run.string(), "--faults", "exit/end=kill;process/start@no-such-program=off", "--json"});
  ASSERT_EQ(env.status, 0) << env.err;
  auto killed = run_with(nlohmann::json::parse(env.out), {testing::program("fl_testdata_pass").string()});
  ASSERT_TRUE(WIFSIGNALED(killed.status)) << killed.status;
  EXPECT_EQ(WTERMSIG(killed.status), SIGKILL);

  auto report = testing::run_faultline({"agent-report", run.string()});
  EXPECT_EQ(report.status, 0) << report.out << report.err;
  EXPECT_NE(report.out.find("fault point reached: exit/end\n"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("warning: fault points no process reached: process/start@no-such-program"), std::string::npos) << report.out;
}

}  // namespace
}  // namespace faultline::harness
