#include "harness/run/runner.h"

#include "harness/run/containment.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include "faults/engine.h"
#include "harness/run/core_dump.h"
#include "harness/run/core_keeper.h"
#include "harness/run/output_capture.h"

#include "faults/preload/phase_table.h"
#include "faults/preload/protocol.h"
#include "harness/detail/sys.h"
#include "harness/results/ranks.h"
#include "harness/run/nccl_ranks.h"
#include "harness/run/phases.h"
#include "harness/run/process.h"
#include "harness/run/process_tree.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

// How long a hang's deadline waits for the live ranks to answer how far their streams completed
// (nccl_ranks.h): each answers in a few cuEventQuery calls, a stopped one never.
constexpr std::chrono::milliseconds rank_answer_budget{500};

std::chrono::milliseconds since(clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t);
}

core::status prepare(const run_request& rq, std::optional<output_capture>& output) {
  std::error_code ec;
  // An existing directory is emptied, not replaced: creating one is the costliest step of a
  // short run on ext4 (campaign.cc reuses one per thread).
  if (fs::is_directory(fs::symlink_status(rq.run_dir, ec))) {
    std::vector<fs::path> left;
    for (fs::directory_iterator it(rq.run_dir, ec), end; !ec && it != end; it.increment(ec))
      if ((it->path().filename() != premature_exit_file && it->path().filename() != agent::phase_table_file) ||
          !it->is_regular_file(ec))
        left.push_back(it->path());
    for (const auto& p : left) fs::remove_all(p, ec);
  } else {
    fs::remove_all(rq.run_dir, ec);
    fs::create_directories(rq.run_dir, ec);
  }
  if (ec) return core::status(core::errc::io_error, "create " + rq.run_dir.string() + ": " + ec.message());
  // The agent's phase table, kept from run to run like the premature-exit file.
  if (auto st = reset_phase_table(rq.run_dir); !st) return st;
  fs::create_directories(rq.log_path.parent_path(), ec);
  auto opened = output_capture::open(rq.log_path, rq.log_limit_bytes);
  if (!opened) return opened.error();
  output.emplace(std::move(*opened));
  // gtest creates this file when it starts and deletes it when the tests are done; creating it
  // first makes "deleted by the program" mean "the tests finished".
  // Kept from the previous run in this directory when that run left it (not a gtest program):
  // a file created and removed per run is a measurable part of a short run's cost.
  int fd = ::open((rq.run_dir / premature_exit_file).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  return {};
}

static_assert(std::string_view(agent::points_file_prefix) == faults::reached_points_file_prefix,
              "the fault engine and the agent write the same points.PID files");

// The agent's side of `outside` capture: a pipe whose write end every process of the run
// inherits (FAULTLINE_AGENT_CRASH_FD), read by the runner.
struct crash_channel {
  int read_fd = -1;
  int write_fd = -1;
  std::string pending;  // a partial line
  ~crash_channel() {
    if (read_fd >= 0) ::close(read_fd);
    if (write_fd >= 0) ::close(write_fd);
  }
};

// Process state letter from /proc/PID/stat ('T' stopped, 'Z' zombie), or 0 when it is gone.
char state_of(pid_t pid) {
  auto st = detail::read_stat(pid);
  return st ? st->state : 0;
}

// Waits (bounded) until `pid` has stopped; false when it died or did not stop in time.
bool wait_stopped(pid_t pid, std::chrono::milliseconds bound) {
  const auto until = clock::now() + bound;
  for (;;) {
    const char st = state_of(pid);
    if (st == 'T' || st == 't') return true;
    if (st == 0 || st == 'Z' || st == 'X' || clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Reads the crash records available on the channel: the processes and threads that crashed.
std::vector<faulted_thread> read_crash_records(crash_channel& ch) {
  std::vector<faulted_thread> pids;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(ch.read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    ch.pending.append(buf, static_cast<std::size_t>(n));
  }
  std::size_t nl;
  while ((nl = ch.pending.find('\n')) != std::string::npos) {
    std::istringstream line(ch.pending.substr(0, nl));
    ch.pending.erase(0, nl + 1);
    std::string word;
    long pid = 0, tid = 0, sig = 0;
    if (line >> word >> pid >> tid >> sig && word == "crash" && pid > 0)
      pids.push_back({static_cast<pid_t>(pid), static_cast<pid_t>(tid)});
  }
  return pids;
}

}  // namespace

std::string_view to_string(crash_capture c) noexcept {
  switch (c) {
    case crash_capture::automatic: return "auto";
    case crash_capture::core: return "core";
    case crash_capture::outside: return "outside";
    case crash_capture::minimal: return "minimal";
    case crash_capture::inside: return "inside";
    case crash_capture::none: return "none";
  }
  return "auto";
}

std::optional<crash_capture> crash_capture_from_string(std::string_view s) noexcept {
  for (auto c : {crash_capture::automatic, crash_capture::core, crash_capture::outside, crash_capture::minimal,
                 crash_capture::inside, crash_capture::none})
    if (to_string(c) == s) return c;
  return std::nullopt;
}

crash_capture resolve_crash_capture(crash_capture requested, std::string* why, const fs::path& cwd) {
  if (why) why->clear();
  if (requested == crash_capture::automatic || requested == crash_capture::core) {
    std::error_code ec;
    std::string no_cores = enable_core_capture();
    if (no_cores.empty()) no_cores = core_destination_problem(cwd.empty() ? fs::current_path(ec) : cwd);
    if (no_cores.empty()) return crash_capture::core;
    if (why) *why = no_cores;
    return crash_capture::none;
  }
  if (requested == crash_capture::outside && !outside_capture_available()) {
    if (why) *why = "neither gdb nor eu-stack is installed";
    return crash_capture::minimal;
  }
  return requested;
}

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

// The run's own tree is gone when this is asked, so an entry held elsewhere belongs to someone
// else on the machine (another campaign, a test beside this one) that created it while the run ran.
std::set<std::string> shm_held_by_others(const std::vector<std::string>& names) {
  std::set<std::string> held;
  if (names.empty()) return held;
  std::set<std::string> paths;
  for (const auto& n : names) paths.insert("/dev/shm/" + n);
  const std::string self = std::to_string(::getpid());
  std::error_code ec;
  for (const auto& proc : fs::directory_iterator("/proc", ec)) {
    const std::string pid = proc.path().filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid == self) continue;
    std::error_code fd_ec;
    for (const auto& fd : fs::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      const std::string target = fs::read_symlink(fd.path(), link_ec).string();
      if (!link_ec && paths.count(target)) held.insert(target.substr(9));
    }
    if (auto maps = detail::read_file((proc.path() / "maps").string())) {
      for (const auto& path : paths) {
        if (maps->find(path) != std::string::npos) held.insert(path.substr(9));
      }
    }
  }
  return held;
}

std::vector<std::string> remove_shm_left_by_runs(const std::vector<std::string>& fresh) {
  if (fresh.empty()) return {};
  std::set<std::string> others = shm_held_by_others(fresh);
  if (others.size() < fresh.size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto now = faultline_shm_entries();
    for (const auto& name : fresh) {
      if (!std::binary_search(now.begin(), now.end(), name)) others.insert(name);
    }
    for (const auto& name : shm_held_by_others(fresh)) others.insert(name);
  }
  std::vector<std::string> left;
  for (const auto& name : fresh) {
    if (others.count(name)) continue;
    left.push_back(name);
    std::error_code ec;
    fs::remove(fs::path("/dev/shm") / name, ec);
  }
  return left;
}

namespace {

// What one run holds from its preparation to its verdict, beyond any single step.
struct run_context {
  run_context(const run_request& request, run_report& report) : rq(request), rep(report) {}
  const run_request& rq;
  run_report& rep;
  std::optional<output_capture> output;  // the run's log
  crash_channel channel;                 // `outside` capture's crash records
  crash_capture capture = crash_capture::none;
  fs::path run_cwd;                      // where the program runs
  fs::path crash_stacks;                 // the crash's stacks, once captured
  std::set<std::string> shm_before;      // /dev/shm's faultline entries before the run
  std::vector<pid_t> alive_at_deadline;  // a hang's live processes, before they were killed
  // The core keeper holds what appears in the watched directory while this run may claim it.
  struct keeper_run {
    std::uint64_t ticket = 0;
    fs::path followed;  // the run directory whose cwd.PID records the keeper follows
    keeper_run() = default;
    keeper_run(const keeper_run&) = delete;
    keeper_run& operator=(const keeper_run&) = delete;
    ~keeper_run() {
      if (!followed.empty()) core_keeper::instance().unfollow(followed);
      if (ticket != 0) core_keeper::instance().end_run(ticket);
    }
  } keeper;
};

run_report& spawn_failed(run_report& rep, std::string message) {
  rep.evidence.spawn_failed = true;
  rep.evidence.spawn_error = std::move(message);
  rep.verdict = classify(rep.evidence);
  return rep;
}

std::vector<std::string> run_environment(const run_request& rq) {
  auto env = rq.env;
  set_env(env, agent::run_dir_env, fs::absolute(rq.run_dir).string());
  set_env(env, "TEST_PREMATURE_EXIT_FILE", fs::absolute(rq.run_dir / premature_exit_file).string());
  if (rq.gtest_output && !get_env(env, "GTEST_OUTPUT"))
    set_env(env, "GTEST_OUTPUT", "xml:" + fs::absolute(rq.run_dir / gtest_xml_file).string());
  return env;
}

// The agent's crash mode for `capture`, unless the environment already names one; `outside`
// opens the crash channel, whose write end the run inherits.
void arm_agent_crash_mode(std::vector<std::string>& env, crash_capture capture, crash_channel& channel) {
  if (get_env(env, agent::crash_mode_env)) return;
  switch (capture) {
    case crash_capture::outside: {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) == 0) {
        channel.read_fd = fds[0];
        channel.write_fd = fds[1];
        ::fcntl(channel.read_fd, F_SETFL, O_NONBLOCK);
        set_env(env, agent::crash_mode_env, "stop");
        set_env(env, agent::crash_fd_env, std::to_string(channel.write_fd));
      } else {
        set_env(env, agent::crash_mode_env, "minimal");
      }
      break;
    }
    case crash_capture::minimal: set_env(env, agent::crash_mode_env, "minimal"); break;
    case crash_capture::inside: set_env(env, agent::crash_mode_env, "report"); break;
    case crash_capture::core:
    case crash_capture::none:
    case crash_capture::automatic: set_env(env, agent::crash_mode_env, "off"); break;
  }
}

// How the run's crash is captured, and the environment and channel that capture needs.
void arm_crash_capture(run_context& run, std::vector<std::string>& env) {
  run.capture = get_env(env, agent::crash_mode_env) ? crash_capture::none : resolve_crash_capture(run.rq.crash, nullptr, run.run_cwd);
  // Where every core of the run's directory gets one name, hold each new one open (core_keeper.h).
  // A run in its own directory (a scenario) has that name to itself.
  if (run.capture == crash_capture::core && !run.rq.in_run_dir) {
    run.keeper.ticket = core_keeper::instance().begin_run();
    (void)keep_cores_apart(run.run_cwd);
  }
  // Where a core falls relative to the crashing process, a process of the run that stands
  // anywhere else says where (the agent's cwd.PID), and its directory is watched as this one.
  if (run.capture == crash_capture::core) {
    if (auto home = core_home(run.run_cwd)) {
      set_env(env, agent::core_home_env, home->string());
      if (!run.rq.in_run_dir && follow_cores(run.rq.run_dir)) run.keeper.followed = run.rq.run_dir;
    }
  }
  arm_agent_crash_mode(env, run.capture, run.channel);
}

spawn_options spawn_options_of(const run_context& run, std::vector<std::string> env) {
  spawn_options so;
  so.argv = run.rq.argv;
  so.envp = std::move(env);
  so.stdout_fd = run.output->write_fd();  // stdout and stderr, as `prog 2>&1 | cat` would have them
  if (run.rq.in_run_dir) so.cwd = run.run_cwd.string();
  so.contain = true;  // the run's tree ends with the harness, however it ends (containment.h)
  if (run.channel.write_fd >= 0) so.keep_fds.push_back(run.channel.write_fd);
  return so;
}

// Captures, from outside, each process that reported a crash on the channel and stopped itself
// (SIGSTOP), then lets it die. Returns how long the program was held meanwhile.
clock::duration capture_crashes_outside(run_context& run, process_tree& tree, short revents) {
  const auto paused = clock::now();
  for (const faulted_thread& crashed : read_crash_records(run.channel)) {
    if (!wait_stopped(crashed.pid, std::chrono::seconds(2))) continue;
    tree.refresh();
    const auto out = run.rq.run_dir / agent::crash_stacks_file;
    stack_options outside = run.rq.stacks;
    outside.method = stack_method::automatic;
    if (capture_stacks_outside(tree.alive(), out, outside, crashed)) run.crash_stacks = out;
    ::kill(crashed.pid, SIGCONT);
  }
  if (revents & (POLLHUP | POLLERR)) {
    ::close(run.channel.read_fd);  // every writer is gone: stop polling it
    run.channel.read_fd = -1;
  }
  return clock::now() - paused;
}

// Waits for the leader, rescanning the tree on a backoff so that short-lived intermediates are
// seen before they exit and their children get reparented. A crash record on the channel
// interrupts the wait: the crashing process is stopped and waits for its capture. True once the
// leader exited; false at the timeout or on cancellation (rep.interrupted).
bool wait_for_leader(run_context& run, const child& leader, process_tree& tree, clock::time_point start) {
  auto deadline = start + run.rq.timeout;
  // A watched run's cgroup names every process of the run, however it was reparented: nothing to
  // rescan while it runs, and nothing of the harness's then competes with the program for a CPU
  // (on a 2-core machine the rescans at 5, 10, 20 ms fell inside exit races and changed them).
  const bool watched = !run_cgroup_of(leader.pid()).empty();
  auto tick = std::chrono::milliseconds(watched ? 200 : 5);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    if (left.count() <= 0) return false;
    pollfd waits[2] = {{leader.pidfd(), POLLIN, 0}, {run.channel.read_fd, POLLIN, 0}};
    int woke = ::poll(waits, 2, static_cast<int>(std::min(left, tick).count()));
    if (woke < 0 && errno != EINTR) woke = 1;  // a pidfd that cannot be polled: treat as gone
    if (woke > 0 && waits[1].revents != 0) {
      deadline += capture_crashes_outside(run, tree, waits[1].revents);  // the program was not running meanwhile
    }
    if (woke > 0 && waits[0].revents != 0) return true;
    if (run.rq.cancel && run.rq.cancel->load()) {
      run.rep.interrupted = true;
      return false;
    }
    if (!watched) tree.refresh();
    tick = std::min(tick * 2, std::chrono::milliseconds(200));
  }
}

// Timed out (or cancelled): stacks first, while every process is still where it hung.
void end_unfinished_run(run_context& run, child& leader, process_tree& tree) {
  run_evidence& ev = run.rep.evidence;
  ev.timed_out = !run.rep.interrupted;
  tree.refresh();
  // Which ranks were alive when the hang was declared (nccl_ranks.h): noted before the kill.
  if (ev.timed_out) {
    for (const auto& p : tree.alive()) run.alive_at_deadline.push_back(p.pid);
    // A distributed run's live ranks say how far their streams have completed, while they can.
    std::map<pid_t, pid_t> own = tree.namespace_pids();
    std::set<pid_t> alive;
    for (pid_t p : run.alive_at_deadline) alive.insert(own.count(p) ? own[p] : p);
    ask_ranks_for_completion(run.rq.run_dir, alive, rank_answer_budget);
  }
  if (ev.timed_out && run.rq.stacks.method != stack_method::none) {
    auto procs = tree.alive();
    ev.stacks_path = run.rq.run_dir / stacks_file;
    if (!capture_stacks(procs, run.rq.run_dir, ev.stacks_path, run.rq.stacks)) ev.stacks_path.clear();
  }
  run.rep.stuck_pids = tree.terminate(run.rq.grace);
  ev.wait_status = leader.reap();
}

// The leader exited: what it left running (after leak_settle) is the run's leak, then ended.
void end_exited_run(run_context& run, child& leader, process_tree& tree) {
  run_evidence& ev = run.rep.evidence;
  ev.wait_status = leader.reap();
  tree.refresh();
  auto survivors = tree.alive();
  if (!survivors.empty()) {
    tree.wait_all_exited(run.rq.leak_settle);
    tree.refresh();
    survivors = tree.alive();
  }
  for (const auto& p : survivors) {
    ev.leaked_pids.push_back(p.pid);
    ev.leaked_comms.push_back(p.comm);
  }
  if (!survivors.empty()) run.rep.stuck_pids = tree.terminate(run.rq.grace);
}

// The kernel's core of the crashed process: every thread, frozen at the fault. Whatever the
// verdict, every core a process of the run left goes: a child that crashed on purpose in a
// passing run leaves no core in the user's directory, and the keeper holds none of it.
void capture_crash_core(run_context& run, const process_tree& tree) {
  if (run.capture != crash_capture::core) return;
  const auto& status = run.rep.evidence.wait_status;
  run_cores cores;
  cores.pids = tree.pids();
  cores.more_pids = [&run] {  // the agent-carrying processes: a child seen by no rescan has a slot
    std::vector<pid_t> out;
    for (const auto& [pid, markers] : read_phases(run.rq.run_dir)) out.push_back(pid);
    return out;
  };
  cores.group = run.rep.evidence.leader;  // started in a process group of its own
  cores.read = run.crash_stacks.empty() && status && WIFSIGNALED(*status);
  const auto out = run.rq.run_dir / agent::crash_stacks_file;
  if (claim_cores(cores, run.run_cwd, run.rq.run_dir, run.rep.started, out) && cores.read) run.crash_stacks = out;
}

// The faultline /dev/shm entries the run created and left: recorded in `ev` and removed (the next
// run must not inherit them).
void collect_leaked_shm(const std::set<std::string>& before, run_evidence& ev) {
  std::vector<std::string> fresh;
  for (const auto& name : faultline_shm_entries()) {
    if (!before.count(name)) fresh.push_back(name);
  }
  for (auto& name : remove_shm_left_by_runs(fresh)) ev.leaked_shm.push_back(std::move(name));
}

// A distributed run's ranks, from the nccl.PID files its processes left (none: nothing is
// added, the run's record stays as it was). A hang is then named by its ranks: which ones kept
// the collective from completing says more than where every rank's threads wait (all of them in
// a stream synchronize), and it groups runs hung at the same collective.
void judge_distributed_run(const run_context& run, const process_tree& tree, classification& verdict) {
  const auto files = read_nccl_ranks(run.rq.run_dir);
  if (files.empty()) return;
  const run_evidence& ev = run.rep.evidence;
  rank_fates fates;
  fates.hang = ev.timed_out;
  std::map<pid_t, pid_t> inside;  // the harness's pid -> the process's own
  for (const auto& [host, own] : tree.namespace_pids()) {
    inside[host] = own;
    fates.host_pid[own] = host;
  }
  auto own_pid = [&](pid_t host) {
    auto it = inside.find(host);
    return it != inside.end() ? it->second : host;
  };
  for (pid_t p : run.alive_at_deadline) fates.alive.insert(own_pid(p));
  if (ev.wait_status) fates.wait_status[own_pid(ev.leader)] = *ev.wait_status;
  add_crashed_ranks(run.rq.run_dir, fates);
  verdict.ranks = judge_ranks(files, fates);
  if (verdict.result != outcome::hang) return;
  if (auto named = ranks_hang_signature(verdict.ranks); !named.empty()) {
    verdict.signature = std::move(named);
    // Ranks waiting in a collective, at their work: the hang is in the run, whatever the leader
    // (a launcher that exits on the harness's SIGTERM) marked once the harness began to end it.
    if (a_live_rank_was_working(files, fates)) verdict.when = phase::run;
  }
}

// The run's tree is gone: its output is finished and, unless the caller keeps the log of a
// passing run, committed (before classify, which reads a failure's log).
void finish_output(run_context& run, clock::time_point end_of_run) {
  run_evidence& ev = run.rep.evidence;
  // Everything of the run's tree is gone: the pipe ends now unless a process outside the run
  // (an escapee under FAULTLINE_CONTAINMENT=none) still holds it.
  run.rep.output = run.output->finish(run.rq.output_grace);
  const bool exited_zero = ev.wait_status && WIFEXITED(*ev.wait_status) && WEXITSTATUS(*ev.wait_status) == 0;
  if (!run.rq.keep_log || !exited_zero) run.output->commit();
  run.rep.teardown = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - end_of_run);
}

}  // namespace

run_report run_once(const run_request& rq) {
  static const core::status subreaper = become_subreaper();
  run_report rep;
  rep.started = std::chrono::system_clock::now();
  run_evidence& ev = rep.evidence;
  ev.run_dir = rq.run_dir;
  ev.log_path = rq.log_path;
  // Each step's time goes to rep.steps: a clock read (vDSO, tens of ns) per step.
  auto mark = clock::now();
  auto step = [&mark](std::chrono::microseconds& into) {
    const auto now = clock::now();
    into = std::chrono::duration_cast<std::chrono::microseconds>(now - mark);
    mark = now;
  };

  if (rq.cpu) rq.cpu->begin();
  run_context run(rq, rep);
  auto ready = prepare(rq, run.output);
  if (!ready || !subreaper) return spawn_failed(rep, (!ready ? ready : subreaper).message());
  ev.premature_exit_armed = true;
  step(rep.steps.prepare);

  auto env = run_environment(rq);
  std::error_code cwd_ec;
  run.run_cwd = rq.in_run_dir ? fs::absolute(rq.run_dir) : fs::current_path(cwd_ec);
  arm_crash_capture(run, env);
  if (rq.check_shm) {
    auto v = faultline_shm_entries();
    run.shm_before = std::set<std::string>(v.begin(), v.end());
  }

  const spawn_options so = spawn_options_of(run, std::move(env));
  step(rep.steps.arm);
  const auto start = clock::now();
  auto spawned = spawn(so);
  run.output->close_write_end();  // the run's processes hold it now
  if (run.channel.write_fd >= 0) {
    ::close(run.channel.write_fd);  // the run's processes hold it now
    run.channel.write_fd = -1;
  }
  if (!spawned) return spawn_failed(rep, spawned.error().message());
  child& leader = *spawned;
  ev.leader = leader.pid();
  process_tree tree(leader.pid(), fs::absolute(rq.run_dir).string());
  step(rep.steps.spawn);
  if (rq.cpu) rq.cpu->attach(run_cgroup_of(leader.pid()));

  const bool exited = wait_for_leader(run, leader, tree, start);
  if (rq.cpu) rq.cpu->detach();
  rep.duration = since(start);
  const auto end_of_run = clock::now();
  step(rep.steps.program);
  if (exited) end_exited_run(run, leader, tree);
  else end_unfinished_run(run, leader, tree);
  step(rep.steps.end);
  capture_crash_core(run, tree);
  ev.crash_stacks_path = run.crash_stacks;
  step(rep.steps.cores);
  tree.reap();
  reap_strays_at_most_every(std::chrono::milliseconds(20));
  step(rep.steps.reap);
  finish_output(run, end_of_run);
  step(rep.steps.output);

  if (rq.check_shm) collect_leaked_shm(run.shm_before, ev);
  rep.verdict = classify(ev);
  judge_distributed_run(run, tree, rep.verdict);
  if (rq.keep_log) {
    if (rq.keep_log(rep)) run.output->commit();
    else run.output->discard();
  }
  step(rep.steps.judge);
  return rep;
}

}  // namespace faultline::harness
