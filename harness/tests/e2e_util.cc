#include "harness/tests/e2e_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "faults/preload/protocol.h"
#include "harness/detail/proc.h"
#include "harness/detail/sys.h"
#include "harness/run/process.h"

namespace faultline::harness::testing {

namespace fs = std::filesystem;

fs::path bin_dir() { return detail::self_dir(); }

fs::path program(const std::string& name) {
  fs::path p = bin_dir() / name;
  EXPECT_TRUE(fs::exists(p)) << p << " is missing: build its target (harness/testdata, faults/preload)";
  return p;
}

fs::path agent_preload() {
  fs::path p = bin_dir().parent_path() / "lib" / "libfaultline_agent.so";
  EXPECT_TRUE(fs::exists(p)) << p << " is missing: build faultline_agent_preload";
  return p;
}

scratch_dir::scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  path_ = fs::temp_directory_path() /
          ("fl_e2e." + std::to_string(::getpid()) + "." + (info ? std::string(info->name()) : std::string("x")));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

scratch_dir::~scratch_dir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

namespace {

command_result run_faultline_argv(std::vector<std::string> argv, const std::vector<std::string>& args,
                                  const std::map<std::string, std::string>& env, std::chrono::seconds timeout) {
  argv.push_back((bin_dir() / "faultline").string());
  argv.insert(argv.end(), args.begin(), args.end());
  auto envp = current_environment();
  for (const auto& [k, v] : env) set_env(envp, k, v.empty() ? std::nullopt : std::optional<std::string>(v));
  auto r = run_tool(argv, timeout, envp, true);
  command_result out;
  if (!r) {
    ADD_FAILURE() << "cannot run faultline: " << r.error().message();
    return out;
  }
  EXPECT_FALSE(r->timed_out) << "faultline ran past " << timeout.count() << "s";
  if (WIFEXITED(r->status)) out.status = WEXITSTATUS(r->status);
  out.out = r->output;
  out.err = r->errors;
  return out;
}

}  // namespace

command_result run_faultline(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                             std::chrono::seconds timeout) {
  return run_faultline_argv({}, args, env, timeout);
}

command_result run_faultline_in(const fs::path& dir, const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env, std::chrono::seconds timeout) {
  return run_faultline_argv({"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", dir.string()}, args, env, timeout);
}

std::vector<fs::path> core_files_under(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if ((name == "core" || name.rfind("core.", 0) == 0) && it->is_regular_file(ec)) out.push_back(it->path());
  }
  return out;
}

std::map<std::string, pid_t> read_pid_file(const fs::path& file, std::chrono::milliseconds wait) {
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (!fs::exists(file) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::map<std::string, pid_t> out;
  std::ifstream in(file);
  std::string label;
  long pid;
  while (in >> label >> pid) out[label] = static_cast<pid_t>(pid);
  return out;
}

bool alive(pid_t pid) {
  auto s = detail::read_stat(pid);
  return s && s->state != 'Z' && s->state != 'X';
}

std::vector<pid_t> processes_of_run(const fs::path& run_dir) {
  std::vector<pid_t> out;
  const std::string want = fs::absolute(run_dir).string();
  for (const auto& p : detail::snapshot()) {
    if (p.state == 'Z') continue;
    if (detail::read_environ_var(p.pid, agent::run_dir_env) == want) out.push_back(p.pid);
  }
  return out;
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::vector<std::string> read_lines(const fs::path& file) {
  std::vector<std::string> out;
  std::ifstream in(file);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<run_record> results_in(const fs::path& out) {
  auto r = read_results(out / "results.jsonl");
  EXPECT_TRUE(r) << r.error().to_string();
  return r ? r->records : std::vector<run_record>{};
}

}  // namespace faultline::harness::testing
