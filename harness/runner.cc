#include "harness/runner.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <set>

#include "harness/agent/protocol.h"
#include "harness/detail/sys.h"
#include "harness/process.h"
#include "harness/process_tree.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

std::chrono::milliseconds since(clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t);
}

core::status prepare(const run_request& rq, int& log_fd) {
  std::error_code ec;
  fs::remove_all(rq.run_dir, ec);
  fs::create_directories(rq.run_dir, ec);
  if (ec) return core::status(core::errc::io_error, "create " + rq.run_dir.string() + ": " + ec.message());
  fs::create_directories(rq.log_path.parent_path(), ec);
  log_fd = ::open(rq.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return detail::sys_error(errno, "open " + rq.log_path.string());
  // gtest creates this file when it starts and deletes it when the tests are done; creating it
  // first makes "deleted by the program" mean "the tests finished".
  int fd = ::open((rq.run_dir / premature_exit_file).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  return {};
}

}  // namespace

std::vector<std::string> faultline_shm_entries() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("faultline", 0) == 0) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

run_report run_once(const run_request& rq) {
  static const core::status subreaper = become_subreaper();
  run_report rep;
  rep.started = std::chrono::system_clock::now();
  run_evidence& ev = rep.evidence;
  ev.run_dir = rq.run_dir;
  ev.log_path = rq.log_path;

  int log_fd = -1;
  auto ready = prepare(rq, log_fd);
  if (!ready || !subreaper) {
    if (log_fd >= 0) ::close(log_fd);
    ev.spawn_failed = true;
    ev.spawn_error = (!ready ? ready : subreaper).message();
    rep.verdict = classify(ev);
    return rep;
  }
  ev.premature_exit_armed = true;

  auto env = rq.env;
  set_env(env, agent::run_dir_env, fs::absolute(rq.run_dir).string());
  set_env(env, "TEST_PREMATURE_EXIT_FILE", fs::absolute(rq.run_dir / premature_exit_file).string());
  if (rq.gtest_output && !get_env(env, "GTEST_OUTPUT"))
    set_env(env, "GTEST_OUTPUT", "xml:" + fs::absolute(rq.run_dir / gtest_xml_file).string());
  const std::set<std::string> shm_before = [&] {
    auto v = rq.check_shm ? faultline_shm_entries() : std::vector<std::string>{};
    return std::set<std::string>(v.begin(), v.end());
  }();

  spawn_options so;
  so.argv = rq.argv;
  so.envp = std::move(env);
  so.stdout_fd = log_fd;
  const auto start = clock::now();
  auto spawned = spawn(so);
  ::close(log_fd);
  if (!spawned) {
    ev.spawn_failed = true;
    ev.spawn_error = spawned.error().message();
    rep.verdict = classify(ev);
    return rep;
  }
  child& leader = *spawned;
  ev.leader = leader.pid();
  process_tree tree(leader.pid(), fs::absolute(rq.run_dir).string());

  // Wait for the leader, rescanning the tree on a backoff so that short-lived intermediates
  // are seen before they exit and their children get reparented.
  const auto deadline = start + rq.timeout;
  auto tick = std::chrono::milliseconds(5);
  bool exited = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    if (left.count() <= 0) break;
    if (leader.wait_exit_for(std::min(left, tick))) {
      exited = true;
      break;
    }
    if (rq.cancel && rq.cancel->load()) {
      rep.interrupted = true;
      break;
    }
    tree.refresh();
    tick = std::min(tick * 2, std::chrono::milliseconds(200));
  }
  rep.duration = since(start);
  const auto end_of_run = clock::now();

  if (!exited) {
    // Timed out (or cancelled): stacks first, while every process is still where it hung.
    ev.timed_out = !rep.interrupted;
    tree.refresh();
    if (ev.timed_out && rq.stacks.method != stack_method::none) {
      auto procs = tree.alive();
      ev.stacks_path = rq.run_dir / stacks_file;
      if (!capture_stacks(procs, rq.run_dir, ev.stacks_path, rq.stacks)) ev.stacks_path.clear();
    }
    rep.stuck_pids = tree.terminate(rq.grace);
    ev.wait_status = leader.reap();
  } else {
    ev.wait_status = leader.reap();
    tree.refresh();
    auto survivors = tree.alive();
    if (!survivors.empty()) {
      tree.wait_all_exited(rq.leak_settle);
      tree.refresh();
      survivors = tree.alive();
    }
    for (const auto& p : survivors) {
      ev.leaked_pids.push_back(p.pid);
      ev.leaked_comms.push_back(p.comm);
    }
    if (!survivors.empty()) rep.stuck_pids = tree.terminate(rq.grace);
  }
  tree.reap();
  reap_strays();
  rep.teardown = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - end_of_run);

  if (rq.check_shm) {
    for (const auto& name : faultline_shm_entries()) {
      if (shm_before.count(name)) continue;
      ev.leaked_shm.push_back(name);
      std::error_code ec;
      fs::remove(fs::path("/dev/shm") / name, ec);  // the next run must not inherit it
    }
  }
  rep.verdict = classify(ev);
  return rep;
}

}  // namespace faultline::harness
