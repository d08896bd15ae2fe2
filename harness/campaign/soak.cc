#include "harness/campaign/soak.h"

#include "harness/run/containment.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/points/random.h"
#include "harness/campaign/duration.h"
#include "harness/results/counted.h"
#include "harness/campaign/fault_space.h"
#include "harness/campaign/scenario_variant.h"
#include "harness/campaign/state_file.h"
#include "harness/detail/sys.h"
#include "harness/run/core_dump.h"
#include "harness/run/core_keeper.h"
#include "harness/run/process.h"
#include "harness/run/process_tree.h"
#include "harness/run/runner.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A soak's runs are numbered without end; the campaign's repeat only has to stay far away.
constexpr std::uint64_t unbounded_repeat = std::numeric_limits<std::uint64_t>::max() / 1024;

// What OUT/soak.json holds.
struct soak_state {
  std::uint64_t seed = 0;
  milliseconds budget{0};
  milliseconds spent{0};
  std::string shard;
  std::vector<std::pair<std::string, std::vector<std::string>>> scenarios;  // name, fault space
  std::optional<std::pair<std::vector<std::string>, std::string>> command;   // argv, faults
  std::uint64_t runs = 0, failures = 0;
  std::vector<std::string> harness_leaks;
  std::string started, updated;
  bool finished = false;
};

nlohmann::json to_json(const soak_state& s) {
  nlohmann::json scenarios = nlohmann::json::array();
  for (const auto& [name, space] : s.scenarios) scenarios.push_back({{"name", name}, {"fault_space", space}});
  nlohmann::json command = nullptr;
  if (s.command) command = {{"argv", s.command->first}, {"faults", s.command->second}};
  return {{"seed", s.seed},      {"budget_ms", s.budget.count()}, {"spent_ms", s.spent.count()},
          {"shard", s.shard},    {"scenarios", scenarios},        {"command", command},
          {"runs", s.runs},      {"failures", s.failures},        {"harness_leaks", s.harness_leaks},
          {"started", s.started}, {"updated", s.updated},         {"finished", s.finished}};
}

core::result<std::optional<soak_state>> read_state(const fs::path& out_dir) {
  soak_state s;
  auto found = read_state_file(out_dir / soak_state_file, "soak state", [&s](const nlohmann::json& j) {
    s.seed = j.at("seed").get<std::uint64_t>();
    s.budget = milliseconds(j.at("budget_ms").get<std::int64_t>());
    s.spent = milliseconds(j.at("spent_ms").get<std::int64_t>());
    if (s.spent.count() < 0) throw nlohmann::json::other_error::create(501, "negative spent_ms", &j);
    s.shard = j.at("shard").get<std::string>();
    for (const auto& sc : j.at("scenarios"))
      s.scenarios.emplace_back(sc.at("name").get<std::string>(), sc.at("fault_space").get<std::vector<std::string>>());
    if (auto c = j.find("command"); c != j.end() && !c->is_null())
      s.command.emplace(c->at("argv").get<std::vector<std::string>>(), c->at("faults").get<std::string>());
    s.runs = j.value("runs", std::uint64_t{0});
    s.failures = j.value("failures", std::uint64_t{0});
    s.harness_leaks = j.value("harness_leaks", std::vector<std::string>());
    s.started = j.value("started", std::string());
  });
  if (!found) return found.error();
  if (!*found) return std::optional<soak_state>();
  return std::optional<soak_state>(std::move(s));
}

core::status write_state(const fs::path& out_dir, const soak_state& s) { return write_state_file(out_dir / soak_state_file, to_json(s)); }

core::status refuse(const fs::path& out_dir, const std::string& why) {
  return core::status(core::errc::invalid_argument, "cannot resume the soak in " + out_dir.string() + ": " + why +
                                                        "; resume with the scenarios or command it was started with, or use another --out");
}

// Whether the soak recorded in OUT (`was`) is the one `o` describes: the same seed (when one is
// given), the same command and spec, or the same scenarios with the same fault spaces.
core::status check_resume(const soak_state& was, const soak_options& o) {
  if (o.seed && *o.seed != was.seed)
    return refuse(o.out_dir, "it was started with --seed " + std::to_string(was.seed) + ", this soak has --seed " + std::to_string(*o.seed));
  if (was.command.has_value() != o.command.has_value())
    return refuse(o.out_dir, was.command ? "it soaks the command `" + detail::shell_join(was.command->first) + "`, not scenarios"
                                         : "it soaks scenarios, not a command");
  if (o.command) {
    if (was.command->first != o.command->argv)
      return refuse(o.out_dir, "it soaks another command (`" + detail::shell_join(was.command->first) + "`)");
    if (was.command->second != o.command->faults)
      return refuse(o.out_dir, "its runs had --faults '" + was.command->second + "', this soak gives '" + o.command->faults + "'");
    return {};
  }
  bool same = was.scenarios.size() == o.scenarios.size();
  for (std::size_t i = 0; same && i < o.scenarios.size(); ++i) same = was.scenarios[i].first == o.scenarios[i].name;
  if (!same) return refuse(o.out_dir, "it soaks another list of scenarios (" + counted(was.scenarios.size(), "scenario") + ")");
  for (std::size_t i = 0; i < o.scenarios.size(); ++i)
    if (was.scenarios[i].second != o.scenarios[i].fault_space)
      return refuse(o.out_dir, "the fault space of " + o.scenarios[i].name + " changed since it started (a rebuilt scenario binary?)");
  return {};
}

// The harness's own open descriptors: number -> what it is.
std::map<int, std::string> own_descriptors() {
  std::map<int, std::string> fds;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return fds;
  const int self = ::dirfd(d);
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == self) continue;
    char target[512];
    const std::string link = "/proc/self/fd/" + std::string(e->d_name);
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    fds[fd] = n > 0 ? std::string(target, static_cast<std::size_t>(n)) : "?";
  }
  ::closedir(d);
  return fds;
}

// The checks between runs: they compare the harness and the machine with how they were when the
// soak started and clean up (and name) whatever the runs since the last check left behind.
class leak_checker {
 public:
  // `own_files`: paths the soak itself keeps open while it runs (its results file, the report
  // and state being rewritten), which are not leaks.
  leak_checker(std::chrono::milliseconds grace, std::vector<std::string> own_files)
      : grace_(grace), fds_(own_descriptors()), own_files_(std::move(own_files)) {
    const auto shm = faultline_shm_entries();
    shm_.insert(shm.begin(), shm.end());
  }

  static constexpr std::chrono::seconds settle{2};

  // Whether an unheld entry is waiting for its second look.
  [[nodiscard]] bool has_suspects() const { return !suspects_.empty(); }

  // Lines describing each leak found (empty when none).
  std::vector<std::string> check(std::uint64_t after_runs) {
    std::vector<std::string> found;
    const std::string when = " (found after " + counted(after_runs, "run") + ")";
    // Processes that escaped every run's tree.
    for (pid_t pid : stray_children()) {
      process_tree t(pid, "");
      t.refresh();
      std::string pids;
      const auto tree = t.pids();
      for (pid_t p : tree) pids += " " + std::to_string(p);
      t.terminate(grace_);
      t.reap();
      found.push_back(std::string(tree.size() == 1 ? "a process" : "processes") + " no run could claim, killed:" + pids + when);
    }
    reap_strays();
    // Shared memory nobody holds any more. Another program on the machine (a test beside the
    // soak) may create an entry and hold it only now and then: an entry counts as left behind
    // once nobody has held it at two checks at least `settle` apart; it is then removed.
    const auto now = clock_type::now();
    std::vector<std::string> fresh;
    for (const auto& name : faultline_shm_entries())
      if (!shm_.count(name)) fresh.push_back(name);
    const auto others = shm_held_by_others(fresh);
    std::map<std::string, clock_type::time_point> still;
    for (const auto& name : fresh) {
      if (others.count(name)) continue;
      auto seen = suspects_.find(name);
      if (seen == suspects_.end()) {
        still.emplace(name, now);
        continue;
      }
      if (now - seen->second < settle) {
        still.insert(*seen);
        continue;
      }
      std::error_code ec;
      fs::remove(fs::path("/dev/shm") / name, ec);
      found.push_back("/dev/shm/" + name + " left by a run, removed" + when);
    }
    suspects_ = std::move(still);
    // Descriptors of the harness itself: every run's pipes and files are closed by now. The
    // soak's own threads (its reporter, the checkpoint) open files for a moment: a descriptor
    // counts once it is there, to the same file, at a second look 50 ms later.
    // The core keeper's are held on purpose (core_keeper.h): a run's core until the run claims
    // it, and each is let go as soon as no run can.
    auto unexpected = [&](const std::map<int, std::string>& fds) {
      std::map<int, std::string> out;
      const std::set<int> kept = core_keeper::instance().descriptors();
      for (const auto& [fd, what] : fds) {
        if (what == "?" || kept.count(fd)) continue;  // closed while we looked, or the keeper's
        auto was = fds_.find(fd);
        if (was != fds_.end() && was->second == what) continue;
        if (std::any_of(own_files_.begin(), own_files_.end(), [&](const std::string& f) { return what.rfind(f, 0) == 0; })) continue;
        out.emplace(fd, what);
      }
      return out;
    };
    const auto first = unexpected(own_descriptors());
    if (!first.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (const auto& [fd, what] : unexpected(own_descriptors())) {
        auto before = first.find(fd);
        if (before == first.end() || before->second != what) continue;
        if (reported_fds_.insert({fd, what}).second)
          found.push_back("the harness holds descriptor " + std::to_string(fd) + " (" + what + ") it did not hold at the start" + when);
      }
    }
    return found;
  }

 private:
  std::chrono::milliseconds grace_;
  std::map<int, std::string> fds_;
  std::set<std::string> shm_;
  std::vector<std::string> own_files_;
  std::set<std::pair<int, std::string>> reported_fds_;        // a leaked descriptor is reported once
  std::map<std::string, clock_type::time_point> suspects_;  // unheld /dev/shm entries, first seen
};

std::string iso_now() { return detail::iso_utc(std::chrono::system_clock::now()); }

fs::path results_path_of(const fs::path& out_dir) { return out_dir / "results.jsonl"; }

// Per scenario, the points of its fault space that no recorded run reached (a misspelt point, or
// one the scenario never gets to): "scenario: point" lines. Reads the results file once, in
// constant memory; a scenario without runs is not judged.
std::vector<std::string> points_never_reached(const soak_options& o, const fs::path& results) {
  std::map<std::string, std::set<std::string>> reached;
  std::map<std::string, std::uint64_t> runs;
  auto scan = scan_results(results, [&](run_record&& r, std::uint64_t) -> core::status {
    ++runs[r.name];
    reached[r.name].insert(r.points_reached.begin(), r.points_reached.end());
    return {};
  });
  std::vector<std::string> out;
  if (!scan) return out;
  for (const auto& sc : o.scenarios) {
    if (!runs[sc.name]) continue;
    for (const auto& item : sc.fault_space) {
      const std::string point = item.substr(0, item.find('='));
      if (!reached[sc.name].count(point))
        out.push_back(sc.name + ": " + point + " (in none of its " + counted(runs[sc.name], "run") + ")");
    }
  }
  return out;
}

std::uint64_t seed_from_clock() {
  const auto ns = std::chrono::system_clock::now().time_since_epoch().count();
  return faults::splitmix64_mix(static_cast<std::uint64_t>(ns)) >> 16;  // short enough to type
}

// What a soak refuses before it looks at OUT.
core::status check_options(const soak_options& o) {
  if (o.scenarios.empty() && !o.command) return core::status(core::errc::invalid_argument, "soak: no scenarios and no command");
  if (!o.scenarios.empty() && o.command)
    return core::status(core::errc::invalid_argument, "soak: scenarios or a command, not both");
  if (o.command && o.command->argv.empty()) return core::status(core::errc::invalid_argument, "soak: the command is empty");
  if (o.budget.count() <= 0) return core::status(core::errc::invalid_argument, "soak: the budget must be positive");
  if (!(o.timeout_scale > 0)) return core::status(core::errc::invalid_argument, "soak: the timeout scale must be positive");
  for (const auto& sc : o.scenarios)
    if (auto s = check_fault_space(sc.fault_space); !s) return core::status(s.code(), sc.name + ": " + s.message());
  return {};
}

// The state the soak starts from: OUT/soak.json's when it resumes one (refused when that soaks
// something else), else a new one. Reads OUT only.
core::result<soak_state> starting_state(const soak_options& o) {
  std::optional<soak_state> was;
  if (o.resume) {
    auto r = read_state(o.out_dir);
    if (!r) return r.error();
    was = std::move(*r);
    std::error_code ec;
    if (!was && fs::exists(o.out_dir / "results.jsonl", ec))
      return core::status(core::errc::invalid_argument,
                          "cannot resume a soak in " + o.out_dir.string() + ": it holds results but no " + soak_state_file +
                              ", so they are a campaign's (of run, exec or verify), not a soak's; continue it with the command "
                              "that made it and --resume, or give the soak another --out");
  }
  soak_state state;
  if (was) {
    if (auto s = check_resume(*was, o); !s) return s;
    state = std::move(*was);
    state.budget = o.budget;  // a resume may extend (or shorten) the budget
    state.finished = false;
  } else {
    state.seed = o.seed ? *o.seed : seed_from_clock();
    state.budget = o.budget;
    for (const auto& sc : o.scenarios) state.scenarios.emplace_back(sc.name, sc.fault_space);
    if (o.command) state.command.emplace(o.command->argv, o.command->faults);
    state.started = iso_now();
  }
  state.shard = o.part.to_string();
  return state;
}

// The soaked variants: the command, or each scenario's clean variant run in its own directory.
std::vector<variant> soak_variants(const soak_options& o) {
  if (o.command) return {*o.command};
  std::vector<variant> variants;
  for (const auto& sc : o.scenarios) {
    const milliseconds timeout(static_cast<std::int64_t>(static_cast<double>(sc.timeout.count()) * o.timeout_scale));
    variants.push_back(scenario_variant(sc, sc.name, "", timeout, {}, o.scenario_binary));
    // A scaled timeout is not the scenario's own: its replay must give it.
    variants.back().replay = o.replay;
    if (timeout != sc.timeout) {
      variants.back().replay.push_back("--timeout");
      variants.back().replay.push_back(format_duration(timeout));
    }
  }
  return variants;
}

// The campaign of the soak's runs, but for what ties it to this invocation (resume, deadline,
// checkpoint, progress suffix, the lock), which run_soak adds. A scenario's run gets a spec drawn
// from its fault space; the command's runs get its own spec, each with a seed of its own.
campaign_options soak_campaign(const soak_options& o, std::uint64_t seed) {
  campaign_options c;
  c.variants = soak_variants(o);
  std::map<std::string, std::vector<std::string>> spaces;
  for (const auto& sc : o.scenarios) spaces[sc.name] = sc.fault_space;
  c.faults_of = [spaces = std::move(spaces), seed](std::uint64_t run, const variant& v) {
    auto space = spaces.find(v.name);
    if (space == spaces.end()) return v.faults;
    auto spec = draw_faults(space->second, fault_draw_seed(seed, run));
    return spec ? *spec : std::string();  // the spaces were checked: a draw cannot fail
  };
  c.repeat = unbounded_repeat;
  c.rotate_per_shard = true;
  c.sweep_shm_at_end = false;  // the checks between runs and the final one do it
  c.seed = seed;
  c.jobs = o.jobs;
  c.part = o.part;
  c.out_dir = o.out_dir;
  c.grace = o.grace;
  c.log_limit_bytes = o.log_limit_bytes;
  c.stacks = o.stacks;
  c.crash = o.crash;
  c.env = o.env;
  c.progress = o.progress;
  c.progress_tty = o.progress_tty;
  c.progress_interval = o.progress_tty ? milliseconds(100) : milliseconds(60'000);
  c.cancel = o.cancel;
  c.keep = o.keep;
  c.warn = o.warn;
  return c;
}

// The harness's own lasting processes and descriptors exist before the descriptor check's first
// look, not as something a run left behind: the containment's (a watchdog and its socket) and,
// for a command run in the harness's directory with its cores read, the core keeper's watch of
// that directory (core_keeper.h), which the first run would otherwise open.
void prepare_harness(const soak_options& o, const std::function<void(const std::string&)>& warn) {
  if (auto s = prepare_containment(o.jobs); !s) warn("containment: " + s.message());
  if (!o.command) return;
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (!ec && resolve_crash_capture(o.crash, nullptr, cwd) == crash_capture::core) (void)keep_cores_apart(cwd);
}

// The campaign's totals into the final state: every run recorded (a resume's included).
void count_runs(soak_state& state, const campaign_result& c) {
  std::uint64_t runs = 0, failures = 0;
  for (const auto& s : c.summaries) {
    runs += s.runs;
    failures += s.failures;
  }
  state.runs = runs;
  state.failures = failures;
  state.finished = c.deadline_reached;
}

// The state the soak starts from, once OUT may hold it (`recorded`: what OUT held, read under
// the soak's lock): the user's choice checked, an earlier soak or campaign cleared when it is
// replaced, OUT created.
core::result<soak_state> open_out_dir(const soak_options& o, const recorded_campaign& recorded) {
  if (auto s = check_out_dir_choice(o.out_dir, o.resume, o.replace); !s) return s;
  auto state = starting_state(o);
  if (!state) return state.error();
  // A new soak replaces an earlier one in the directory only when asked (checked above).
  if (!o.resume && recorded.any()) {
    if (auto s = clear_recorded_campaign(o.out_dir); !s) return s;
    if (o.warn) o.warn("replaced the earlier " + std::string(recorded.soak ? "soak" : "campaign") + " in " + o.out_dir.string() + " (--replace)");
  }
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return core::status(core::errc::io_error, "create " + o.out_dir.string() + ": " + ec.message());
  return state;
}

// The soak's state (OUT/soak.json) while it runs, and its clock: the campaign's checkpoints, the
// reporter thread and the end each update and write it, one at a time. The budget spent counts
// from the state's `spent` (a resume's) and the moment this keeper is made.
class state_keeper {
 public:
  state_keeper(const soak_options& o, soak_state state)
      : o_(o),
        start_(clock_type::now()),
        spent_before_(state.spent),
        budget_(state.budget),
        last_write_(start_),
        state_(std::move(state)) {}

  [[nodiscard]] std::uint64_t seed() const { return state_.seed; }  // never changes
  [[nodiscard]] milliseconds spent() const {
    return spent_before_ + std::chrono::duration_cast<milliseconds>(clock_type::now() - start_);
  }
  // What was left of the budget at the start.
  [[nodiscard]] milliseconds left() const { return budget_ > spent_before_ ? budget_ - spent_before_ : milliseconds(0); }
  [[nodiscard]] clock_type::time_point deadline() const { return start_ + left(); }
  // The end of the progress line: ", 12m of 8h budget".
  [[nodiscard]] std::string budget_line() const {
    return ", " + format_duration(std::chrono::duration_cast<std::chrono::seconds>(spent())) + " of " + format_duration(budget_) +
           " budget";
  }

  // Written as it is (the soak's start).
  core::status write() {
    std::lock_guard lock(mu_);
    return write_state(o_.out_dir, state_);
  }
  // Written with the time spent so far (the reporter's rewrite); a failure is a warning.
  void update() {
    std::lock_guard lock(mu_);
    stamp();
    write_or_warn();
  }
  // A checkpoint's: the leaks found and the runs recorded so far (a resume's included), written
  // at most once a second, or at once when a leak was found.
  void checkpoint(std::vector<std::string> found, std::uint64_t runs, std::uint64_t failures) {
    std::lock_guard lock(mu_);
    const bool leaked = !found.empty();
    add_leaks(std::move(found));
    state_.runs = runs;
    state_.failures = failures;
    if (clock_type::now() - last_write_ < std::chrono::seconds(1) && !leaked) return;
    last_write_ = clock_type::now();
    stamp();
    write_or_warn();
  }
  // The last one, whatever the campaign's fate (`c` null: it failed), so that a failed write
  // elsewhere does not lose what the soak knows. Returns the write's status and the state written.
  std::pair<core::status, soak_state> finish(std::vector<std::string> found, const campaign_result* c) {
    std::lock_guard lock(mu_);
    add_leaks(std::move(found));
    stamp();
    if (c) count_runs(state_, *c);
    return {write_state(o_.out_dir, state_), state_};
  }

 private:
  void stamp() {
    state_.spent = spent();
    state_.updated = iso_now();
  }
  void write_or_warn() {
    if (auto s = write_state(o_.out_dir, state_); !s && o_.warn) o_.warn("cannot update " + std::string(soak_state_file) + ": " + s.message());
  }
  void add_leaks(std::vector<std::string> found) {
    for (auto& f : found) {
      if (o_.warn) o_.warn("harness leak: " + f);
      state_.harness_leaks.push_back(std::move(f));
    }
  }

  const soak_options& o_;
  const clock_type::time_point start_;
  const milliseconds spent_before_, budget_;
  std::mutex mu_;  // guards everything below
  clock_type::time_point last_write_;
  soak_state state_;
};

// The soak's report, OUT/report.{html,md}, written through soak_options::write_report (none: no
// report). Its files are open while it writes: the descriptor check holds files() meanwhile.
class soak_report {
 public:
  soak_report(const soak_options& o, std::uint64_t seed)
      : o_(o), seed_(seed), html_(o.out_dir / "report.html"), markdown_(o.out_dir / "report.md") {}

  std::mutex& files() { return files_mu_; }

  // 0 when every file was written; -1 with no writer; a failure is a warning.
  int write(bool final) {
    if (!o_.write_report) return -1;
    soak_report_request r;
    r.out_dir = o_.out_dir;
    r.html = html_;
    r.markdown = markdown_;
    r.plotly_js = o_.plotly_js;
    r.title = "faultline soak, seed " + std::to_string(seed_) + (final ? "" : " (running)");
    std::ostringstream out, err;
    std::unique_lock files(files_mu_);
    const int rc = o_.write_report(r, out, err);
    files.unlock();
    if (rc != 0 && o_.warn) {
      std::string why = err.str();
      while (!why.empty() && why.back() == '\n') why.pop_back();
      o_.warn("the soak's report was not (fully) written: " + why);
    }
    return rc;
  }

  // The last one, named in `result` as far as it was written.
  void write_final(soak_result& result) {
    std::error_code ec;
    if (write(true) == 0) {
      result.report_html = html_;
      result.report_markdown = markdown_;
    } else if (o_.write_report && fs::exists(markdown_, ec)) {
      result.report_markdown = markdown_;
    }
  }

 private:
  const soak_options& o_;
  const std::uint64_t seed_;
  const fs::path html_, markdown_;
  std::mutex files_mu_;
};

// A thread that calls `tick` every `every` until stop() (or the destructor), which joins it: the
// soak's state and report rewritten while the runs go on (a line being appended while the report
// reads is a torn last line, which the reader skips).
class reporter {
 public:
  reporter(milliseconds every, std::function<void()> tick)
      : every_(every), tick_(std::move(tick)), thread_([this] { loop(); }) {}
  reporter(const reporter&) = delete;
  reporter& operator=(const reporter&) = delete;
  ~reporter() { stop(); }

  void stop() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, every_, [this] { return done_; })) {
      lock.unlock();
      tick_();
      lock.lock();
    }
  }

  const milliseconds every_;
  const std::function<void()> tick_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;     // under mu_
  std::thread thread_;    // last: it starts once the members above are made
};

// The checks after the campaign: an entry seen unheld for the first time gets its second look.
std::vector<std::string> last_leak_check(leak_checker& leaks, std::uint64_t after_runs) {
  std::vector<std::string> found = leaks.check(after_runs);
  if (leaks.has_suspects()) {
    std::this_thread::sleep_for(leak_checker::settle);
    for (auto& f : leaks.check(after_runs)) found.push_back(std::move(f));
  }
  return found;
}

// The paths the soak itself keeps open while it runs, which are no leak: its results file and
// the report and state being rewritten.
std::vector<std::string> own_files(const fs::path& out_dir) {
  std::error_code ec;
  const fs::path out_abs = fs::absolute(out_dir, ec).lexically_normal();
  return {(out_abs / "results.jsonl").string(), (out_abs / "report.").string(), (out_abs / soak_state_file).string()};
}

}  // namespace

core::result<soak_result> run_soak(const soak_options& o) {
  if (auto s = check_options(o); !s) return s;
  // Held until the last state and report are written; the campaign runs under it (c.out_lock).
  auto out_lock = out_dir_lock::acquire(o.out_dir);
  if (!out_lock) return out_lock.error();
  auto recorded = find_recorded_campaign(o.out_dir, false);
  if (!recorded) return recorded.error();
  auto started = open_out_dir(o, *recorded);
  if (!started) return started.error();
  state_keeper state(o, std::move(*started));
  if (auto s = state.write(); !s) return s;

  campaign_options c = soak_campaign(o, state.seed());
  // The campaign continues when there is one (results or its manifest): a soak killed before
  // its campaign began has only its state.
  c.resume = o.resume && (recorded->results || recorded->manifest);
  c.out_lock = &*out_lock;
  c.deadline = state.deadline();
  c.progress_suffix = [&state] { return state.budget_line(); };

  prepare_harness(o, [&o](const std::string& text) {
    if (o.warn) o.warn(text);
  });
  // Between runs: the leak checks (every few runs) and the state (at most once a second). The
  // descriptors are compared with those of now, the harness prepared.
  leak_checker leaks(o.grace, own_files(o.out_dir));
  soak_report report(o, state.seed());
  c.checkpoint_runs = std::max<std::uint64_t>(1, std::uint64_t{4} * o.jobs);
  c.checkpoint = [&](std::uint64_t recorded_runs, std::uint64_t failures) {
    std::unique_lock files(report.files());  // the reporter's files are open while it writes
    auto found = leaks.check(recorded_runs);
    files.unlock();
    state.checkpoint(std::move(found), recorded_runs, failures);
  };
  reporter rewrites(o.report_every, [&] {
    state.update();
    report.write(false);
  });
  auto campaign = run_campaign(c);
  rewrites.stop();

  auto [written, last] = state.finish(last_leak_check(leaks, campaign ? campaign->performed : 0), campaign ? &*campaign : nullptr);
  if (!campaign) return campaign.error();
  if (!written) return written;
  soak_result result;
  result.campaign = std::move(*campaign);
  result.seed = last.seed;
  result.spent = last.spent;
  result.harness_leaks = std::move(last.harness_leaks);
  result.budget_spent = result.campaign.deadline_reached || state.left().count() == 0;
  result.points_never_reached = points_never_reached(o, results_path_of(o.out_dir));
  report.write_final(result);
  return result;
}

}  // namespace faultline::harness
