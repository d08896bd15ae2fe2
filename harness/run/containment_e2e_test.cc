// Containment (DESIGN.md §8.3): a run's whole tree dies with the run, and with the harness however the
// harness dies. Method: each containment this kernel allows is forced in turn — in process
// through spawn_contained, and end to end through FAULTLINE_CONTAINMENT — over real programs
// whose descendants escape a process-group kill (setsid, double fork, a cleared environment).
// In process: the program's exit status arrives exact, it starts as posix_spawn would start it
// (default signals, empty mask, own process group, only the descriptors it is given), its orphans
// are members of the run's tree, and destroying the child ends what is left. End to end:
// `faultline exec --jobs 2` is SIGKILLed with its runs in flight and, within 5 s, no process of
// any run is left, found by a marker in their environment. With FAULTLINE_CONTAINMENT=none the
// same check finds the survivors: the test can fail.
#include "harness/run/containment.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <csignal>
#include <functional>
#include <set>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "harness/detail/proc.h"
#include "harness/detail/sys.h"
#include "harness/run/process.h"
#include "harness/run/process_tree.h"
#include "harness/tests/e2e_util.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr const char* marker_env = "FL_CONTAINMENT_TEST_MARK";

std::string unique_marker(const std::string& what) {
  return what + "." + std::to_string(::getpid()) + "." +
         std::to_string(clock_type::now().time_since_epoch().count());
}

// Live processes (zombies excluded) whose environment has marker_env=marker.
std::vector<pid_t> marked(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& p : detail::snapshot()) {
    if (p.state == 'Z' || p.state == 'X') continue;
    if (detail::read_environ_var(p.pid, marker_env) == marker) out.push_back(p.pid);
  }
  return out;
}

// Polls until pred() or `limit` passes; returns pred()'s last value. Reaps stray zombies meanwhile:
// this process is a subreaper, so the processes of a killed faultline become its children, and
// a namespace's pid 1 does not finish exiting before every process of its namespace is reaped.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit) {
  auto deadline = clock_type::now() + limit;
  for (;;) {
    reap_strays();
    if (pred()) return true;
    if (clock_type::now() >= deadline) return pred();
    std::this_thread::sleep_for(20ms);
  }
}

void kill_marked(const std::string& marker) {
  for (pid_t p : marked(marker)) ::kill(p, SIGKILL);
  eventually([&] { return marked(marker).empty(); }, 5s);
  reap_strays();
}

std::vector<std::string> with_marker(const std::string& marker) {
  auto env = current_environment();
  set_env(env, marker_env, marker);
  return env;
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// Runs argv contained with stdout into a pipe; returns (wait status, output).
std::pair<int, std::string> run_capturing(containment_kind kind, std::vector<std::string> argv,
                                          std::vector<int> keep_fds = {}, std::string cwd = {}) {
  int out[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  spawn_options o;
  o.argv = std::move(argv);
  o.envp = current_environment();
  o.stdout_fd = out[1];
  o.keep_fds = std::move(keep_fds);
  o.cwd = std::move(cwd);
  auto c = spawn_contained(o, kind);
  ::close(out[1]);
  if (!c) {
    ::close(out[0]);
    ADD_FAILURE() << c.error().message();
    return {-1, ""};
  }
  std::string text = read_all(out[0]);
  ::close(out[0]);
  int status = c->reap();
  return {status, text};
}

// ---------------------------------------------------------------------------------------------
// In process, for every containment this machine allows.
// ---------------------------------------------------------------------------------------------

class contained : public ::testing::TestWithParam<containment_kind> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(become_subreaper());
    if (auto s = containment_available(GetParam()); !s) GTEST_SKIP() << s.message();
  }
  containment_kind kind() const { return GetParam(); }
};

TEST_P(contained, relays_the_programs_exact_wait_status) {
  auto [exited, out1] = run_capturing(kind(), {"/bin/sh", "-c", "exit 7"});
  ASSERT_TRUE(WIFEXITED(exited));
  EXPECT_EQ(WEXITSTATUS(exited), 7);
  auto [killed, out2] = run_capturing(kind(), {"/bin/sh", "-c", "kill -USR1 $$"});
  ASSERT_TRUE(WIFSIGNALED(killed)) << killed;
  EXPECT_EQ(WTERMSIG(killed), SIGUSR1);
}

TEST_P(contained, finds_programs_in_path_and_reports_missing_ones) {
  auto [status, out] = run_capturing(kind(), {"true"});
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  spawn_options o;
  o.envp = current_environment();
  o.argv = {"/nonexistent/fl-containment-program"};
  auto missing = spawn_contained(o, kind());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.code(), core::errc::not_found) << missing.error().message();
  o.argv = {"fl-containment-no-such-program"};
  auto unknown = spawn_contained(o, kind());
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.code(), core::errc::not_found);
}

TEST_P(contained, program_starts_with_default_signals_its_own_group_and_its_host_pid) {
  // An ignored and a blocked signal in the harness must not reach the program.
  struct sigaction ign {}, old_usr2 {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGUSR2, &ign, &old_usr2);
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &block, &old_mask);
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  spawn_options o;
  o.argv = {"/bin/sh", "-c", "cat /proc/self/stat; grep -E '^(SigBlk|SigIgn)' /proc/self/status; read line"};
  o.envp = current_environment();
  o.stdout_fd = out[1];
  auto c = spawn_contained(o, kind());
  ::sigaction(SIGUSR2, &old_usr2, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::close(out[1]);
  ASSERT_TRUE(c) << c.error().message();
  std::string text = read_all(out[0]);
  ::close(out[0]);
  EXPECT_TRUE(WIFEXITED(c->reap()));
  // cat's stat: "PID (cat) S PPID PGRP ..." in the harness's numbering; cat's group is the
  // program's (sh leads it), and its parent is the program.
  auto stat = detail::parse_stat(text.substr(0, text.find('\n')));
  ASSERT_TRUE(stat) << text;
  EXPECT_EQ(stat->ppid, c->pid());
  EXPECT_EQ(stat->pgrp, c->pid());
  // sh's signal state as it was exec'd (sh itself changes none of these for -c).
  EXPECT_NE(text.find("SigBlk:\t0000000000000000"), std::string::npos) << text;
  EXPECT_NE(text.find("SigIgn:\t0000000000000000"), std::string::npos) << text;
}

TEST_P(contained, program_gets_its_kept_descriptors_and_none_of_the_harness_others) {
  int kept[2], foreign[2];
  ASSERT_EQ(::pipe2(kept, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(foreign, O_CLOEXEC), 0);
  const std::string script = "echo kept >&" + std::to_string(kept[1]) + "; test -e /proc/$$/fd/" +
                             std::to_string(foreign[1]) + " && echo foreign-open || echo foreign-closed";
  auto [status, text] = run_capturing(kind(), {"/bin/sh", "-c", script}, {kept[1]});
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(text, "foreign-closed\n");
  ::close(kept[1]);
  EXPECT_EQ(read_all(kept[0]), "kept\n");
  for (int fd : {kept[0], foreign[0], foreign[1]}) ::close(fd);
}

TEST_P(contained, program_starts_in_the_directory_asked_for) {
  for (containment_kind k : {kind(), containment_kind::none}) {
    auto [status, text] = run_capturing(k, {"/bin/sh", "-c", "pwd"}, {}, "/");
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_EQ(text, "/\n") << to_string(k);
    auto [status3, text3] = run_capturing(k, {"/bin/sh", "-c", "pwd"});
    EXPECT_EQ(text3, std::filesystem::current_path().string() + "\n") << to_string(k);
  }
}

TEST_P(contained, orphans_that_leave_the_group_are_members_of_the_tree) {
  const std::string marker = unique_marker("orphans");
  spawn_options o;
  o.argv = {"/bin/sh", "-c", "(setsid sleep 300 &) ; sleep 300"};
  o.envp = with_marker(marker);
  auto c = spawn_contained(o, kind());
  ASSERT_TRUE(c) << c.error().message();
  if (keeper_per_run(kind())) {
    EXPECT_GT(c->keeper(), 0);
    EXPECT_EQ(keeper_of(c->pid()), c->keeper());
    auto strays = stray_children();
    EXPECT_EQ(std::count(strays.begin(), strays.end(), c->keeper()), 0) << "a keeper is owned, never a stray";
  } else {  // cgroup+watchdog: the program is our own child, its orphans found in its cgroup
    EXPECT_EQ(c->keeper(), -1);
    EXPECT_NE(run_cgroup_of(c->pid()), "");
  }
  process_tree tree(c->pid(), "/nonexistent/run");
  EXPECT_EQ(tree.keeper(), c->keeper());
  // sh, the subshell's setsid sleep (orphaned: reparented to the keeper) and sh's sleep.
  EXPECT_TRUE(eventually([&] { tree.refresh(); return tree.alive().size() == 3; }, 10s)) << tree.alive().size();
  auto pids = tree.pids();
  EXPECT_EQ(std::count(pids.begin(), pids.end(), c->keeper()), 0) << "the keeper is not a member";
  if (kind() == containment_kind::pid_namespace) {
    auto inner = tree.namespace_pids();
    EXPECT_GT(inner[c->pid()], 1) << "the program has a pid of its own inside, the keeper being pid 1";
  } else {
    EXPECT_TRUE(tree.namespace_pids().empty());
  }
  EXPECT_TRUE(tree.terminate(500ms).empty());
  int status = c->reap();
  EXPECT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(marked(marker), std::vector<pid_t>{});
}

TEST_P(contained, destroying_the_child_ends_its_whole_tree_and_its_keeper) {
  const std::string marker = unique_marker("destroy");
  pid_t keeper = -1;
  {
    spawn_options o;
    o.argv = {"/bin/sh", "-c", "(setsid sh -c 'sleep 300 & exec env -i sleep 300' &) ; sleep 300"};
    o.envp = with_marker(marker);
    auto c = spawn_contained(o, kind());
    ASSERT_TRUE(c) << c.error().message();
    keeper = c->keeper();
    // sh, sleep, setsid's sh (its sleep and the exec'd env -i sleep carry no marker).
    EXPECT_TRUE(eventually([&] { return marked(marker).size() >= 3; }, 10s)) << marked(marker).size();
  }
  EXPECT_EQ(marked(marker), std::vector<pid_t>{});
  // Its tree was alive: the keeper ends it by ending itself (a pooled one too; an empty
  // namespace goes back to the pool, see pooled_keepers_serve_run_after_run...).
  EXPECT_FALSE(testing::alive(keeper));
  EXPECT_FALSE(is_owned(keeper));
}

TEST_P(contained, pooled_keepers_serve_run_after_run_and_a_leftover_retires_its_keeper) {
  if (!keepers_pooled(kind())) GTEST_SKIP() << "one keeper per run here";
  ASSERT_TRUE(prepare_containment(1));
  auto run = [&](const std::string& script) {
    spawn_options o;
    o.argv = {"/bin/sh", "-c", script};
    o.envp = current_environment();
    auto c = spawn_contained(o, kind());
    EXPECT_TRUE(c) << c.error().message();
    if (!c) return pid_t{-1};
    pid_t k = c->keeper();
    c->reap();
    return k;
  };
  pid_t first = run("exit 0");
  EXPECT_EQ(run("exit 0"), first) << "an empty namespace's keeper is lent again";
  // A run that leaves an orphan behind: its keeper is not lent again but killed, and with it the
  // orphan (the kernel ends the namespace).
  const std::string marker = unique_marker("leftover");
  spawn_options o;
  o.argv = {"/bin/sh", "-c", "(setsid sleep 300 &) ; sleep 0.1"};
  o.envp = with_marker(marker);
  pid_t leaky_keeper = -1;
  {
    auto c = spawn_contained(o, kind());
    ASSERT_TRUE(c) << c.error().message();
    leaky_keeper = c->keeper();
    c->reap();
    EXPECT_TRUE(eventually([&] { return marked(marker).size() == 1; }, 5s));
  }
  EXPECT_EQ(marked(marker), std::vector<pid_t>{});
  EXPECT_FALSE(testing::alive(leaky_keeper));
  EXPECT_NE(run("exit 0"), leaky_keeper);
}

INSTANTIATE_TEST_SUITE_P(kinds, contained,
                         ::testing::Values(containment_kind::pid_namespace, containment_kind::keeper_cgroup,
                                           containment_kind::keeper),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

// The keeper is exec'd from faultline-keeper beside the test binary (or cloned from this
// process under FAULTLINE_KEEPER=clone), and only the program carries the run's environment: a
// keeper that did would look like one of the run's processes to anything reading environ.
TEST(containment, keeper_runs_the_keeper_program_without_the_runs_environment) {
  if (!containment_available(containment_kind::keeper)) GTEST_SKIP() << "no keepers here";
  const std::string marker = unique_marker("keeper-env");
  spawn_options o;
  o.argv = {"/bin/sleep", "30"};
  o.envp = with_marker(marker);
  auto c = spawn_contained(o, containment_kind::keeper);
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_GT(c->keeper(), 0);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(c->keeper()) + "/exe", ec);
  ASSERT_FALSE(ec) << ec.message();
  const char* how = std::getenv(keeper_env);
  if (how != nullptr && std::string(how) == "clone")
    EXPECT_EQ(exe, std::filesystem::read_symlink("/proc/self/exe")) << "a clone of the harness";
  else
    EXPECT_EQ(exe.filename(), "faultline-keeper");
  EXPECT_EQ(marked(marker), std::vector<pid_t>{c->pid()});
  EXPECT_TRUE(c->signal(SIGKILL));
  const int status = c->reap();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

// A run's cgroup is lent again once the run left it empty, instead of a new one per run; one a
// killed harness left behind (faultline.PID.N of a dead PID) is removed by the next harness.
TEST(containment, an_empty_run_cgroup_serves_the_next_run_and_stale_ones_are_removed) {
  if (!containment_available(containment_kind::keeper_cgroup)) GTEST_SKIP() << "no cgroup v2 here";
  auto cgroup_of_run = [] {
    auto [status, text] = run_capturing(containment_kind::keeper_cgroup, {"/bin/sh", "-c", "grep '^0::' /proc/self/cgroup"});
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    return text;
  };
  const std::string first = cgroup_of_run();
  EXPECT_NE(first.find("/faultline." + std::to_string(::getpid()) + "."), std::string::npos) << first;
  std::string dir_of_first = first.substr(first.find("::") + 2);
  if (!dir_of_first.empty()) dir_of_first.pop_back();  // the newline
  std::filesystem::path mount;
  for (const char* m : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"})
    if (std::filesystem::exists(std::string(m) + dir_of_first)) mount = m;
  ASSERT_FALSE(mount.empty()) << "cannot find the cgroup " << dir_of_first;
  const auto parent = (mount / dir_of_first.substr(1)).parent_path();
  EXPECT_EQ(cgroup_of_run(), first) << "the first run's cgroup, empty again, is lent to the second";
  {  // a run that leaves an orphan behind: ended with its keeper; the runs after it still start
    spawn_options o;
    o.argv = {"/bin/sh", "-c", "(setsid sleep 300 &) ; exit 0"};
    o.envp = current_environment();
    auto c = spawn_contained(o, containment_kind::keeper_cgroup);
    ASSERT_TRUE(c) << c.error().message();
    EXPECT_EQ(c->reap(), 0);
  }
  for (int i = 0; i < 3; ++i) EXPECT_NE(cgroup_of_run().find("/faultline."), std::string::npos);

  // A dead harness's cgroup beside this process's: the next faultline removes it at start.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const auto stale = parent / ("faultline." + std::to_string(dead) + ".7");
  ASSERT_EQ(::mkdir(stale.c_str(), 0755), 0) << std::strerror(errno);
  testing::scratch_dir out;
  auto r = testing::run_faultline({"exec", "--repeat", "1", "--out", (out.path() / "o").string(), "--", "/bin/true"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(stale)) << stale;
  ::rmdir(stale.c_str());
}

TEST(containment, summary_names_the_containment_in_use) {
  const auto& c = containment();
  EXPECT_TRUE(containment_available(c.kind));
  EXPECT_FALSE(c.summary.empty());
  EXPECT_EQ(containment_summary().rfind(c.summary, 0), 0u) << containment_summary();
  // By default a pid namespace is never chosen (it changes the pids the program sees).
  EXPECT_NE(c.kind, containment_kind::pid_namespace);
  if (c.kind == containment_kind::keeper_cgroup) EXPECT_TRUE(c.why.empty()) << c.why;
  else EXPECT_FALSE(c.why.empty()) << "a weaker containment says why";
}

// ---------------------------------------------------------------------------------------------
// End to end: SIGKILL of `faultline` with runs in flight.
// ---------------------------------------------------------------------------------------------

struct process_id {
  pid_t pid;
  std::uint64_t start_time;
};

std::vector<process_id> children_of(pid_t parent) {
  std::vector<process_id> out;
  for (const auto& p : detail::snapshot())
    if (p.ppid == parent) out.push_back({p.pid, p.start_time});
  return out;
}

bool still_running(const process_id& p) {
  auto s = detail::read_stat(p.pid);
  return s && s->start_time == p.start_time && s->state != 'Z' && s->state != 'X';
}

class harness_killed : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(become_subreaper()); }

  // Starts `faultline exec --jobs 2 --repeat 4` of `command` with FAULTLINE_CONTAINMENT=mode,
  // waits until `expected` processes carry the marker, then SIGKILLs faultline. Returns the
  // faultline's children (keepers) seen just before.
  std::vector<process_id> start_and_kill(const std::string& mode, const std::string& marker,
                                         const std::vector<std::string>& command, std::size_t expected,
                                         const std::function<bool()>& also_ready = [] { return true; }) {
    spawn_options o;
    o.argv = {(testing::bin_dir() / "faultline").string(), "exec", "--jobs", "2", "--repeat", "4",
              "--timeout", "60s", "--env", std::string(marker_env) + "=" + marker, "--out", dir_.path().string(),
              "--replace", "--"};  // each call a new campaign in the one directory (a test may make two)
    o.argv.insert(o.argv.end(), command.begin(), command.end());
    o.envp = current_environment();
    set_env(o.envp, containment_env, mode);
    auto c = spawn(o);
    if (!c) {
      ADD_FAILURE() << c.error().message();
      return {};
    }
    EXPECT_TRUE(eventually([&] { return marked(marker).size() >= expected && also_ready(); }, 30s))
        << "the runs did not start: " << marked(marker).size() << " of " << expected << " processes";
    auto keepers = children_of(c->pid());
    EXPECT_TRUE(c->signal(SIGKILL));
    int status = c->reap();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    return keepers;
  }

  testing::scratch_dir dir_;
};

TEST_F(harness_killed, no_process_of_any_run_survives_under_the_default_containment) {
  const std::string marker = unique_marker("default");
  // Two runs of three processes: the program, its setsid child, the grandchild.
  auto keepers = start_and_kill("auto", marker, {testing::program("fl_testdata_hang_grandchild").string()}, 6);
  EXPECT_TRUE(eventually([&] { return marked(marker).empty(); }, 5s))
      << marked(marker).size() << " processes of the runs survived " << containment_summary();
  for (const auto& k : keepers) EXPECT_TRUE(eventually([&] { return !still_running(k); }, 5s)) << k.pid;
  kill_marked(marker);
}

TEST_F(harness_killed, no_process_survives_under_each_fallback) {
  for (const char* mode : {"cgroup", "keeper"}) {
    SCOPED_TRACE(mode);
    const auto kind = std::string(mode) == "cgroup" ? containment_kind::keeper_cgroup : containment_kind::keeper;
    if (!containment_available(kind)) continue;
    const std::string marker = unique_marker(mode);
    auto keepers = start_and_kill(mode, marker, {testing::program("fl_testdata_hang_grandchild").string()}, 6);
    EXPECT_TRUE(eventually([&] { return marked(marker).empty(); }, 5s))
        << marked(marker).size() << " processes of the runs survived";
    for (const auto& k : keepers) EXPECT_TRUE(eventually([&] { return !still_running(k); }, 5s)) << k.pid;
    kill_marked(marker);
  }
}

TEST_F(harness_killed, an_orphan_that_cleared_its_environment_does_not_survive) {
  // The daemon carries no marker (env -i): it is found by its unique argument instead.
  const std::string token = "311." + std::to_string(::getpid() % 1000);
  auto by_token = [&] {
    std::vector<pid_t> out;
    for (const auto& p : detail::snapshot()) {
      if (p.state == 'Z') continue;
      auto cmd = detail::read_file("/proc/" + std::to_string(p.pid) + "/cmdline", 4096);
      if (cmd && cmd->find(token) != std::string::npos) out.push_back(p.pid);
    }
    return out;
  };
  const std::string marker = unique_marker("cleared");
  // Per run: the exec'd sleep (marked) and the daemon (not); two runs at once.
  start_and_kill("auto", marker, {"/bin/sh", "-c", "(setsid env -i /bin/sleep " + token + " &) ; exec /bin/sleep " + token},
                 2, [&] { return by_token().size() >= 4; });
  EXPECT_TRUE(eventually([&] { return by_token().empty(); }, 5s)) << by_token().size() << " survived";
  for (pid_t p : by_token()) ::kill(p, SIGKILL);
  kill_marked(marker);
}

TEST_F(harness_killed, without_containment_the_runs_survive_and_this_test_would_see_it) {
  const std::string marker = unique_marker("none");
  start_and_kill("none", marker, {testing::program("fl_testdata_hang_grandchild").string()}, 6);
  std::this_thread::sleep_for(500ms);
  EXPECT_GE(marked(marker).size(), 6u) << "process-group-only containment is expected to leak on SIGKILL";
  kill_marked(marker);
}

}  // namespace
}  // namespace faultline::harness
