#include "harness/triage/bisect.h"

#include <stdlib.h>
#include <sys/wait.h>


#include "harness/campaign/out_lock.h"
#include "harness/campaign/state_file.h"
#include "harness/detail/sys.h"
#include "harness/results/counted.h"
#include "harness/run/process.h"
#include "harness/triage/sampler.h"
#include "reports/significance.h"

namespace faultline::harness {
namespace {

namespace fs = std::filesystem;
constexpr std::chrono::milliseconds git_timeout = std::chrono::minutes(5);

// `git -C repo ARGS`; its stdout, or an error with what it said.
core::result<std::string> git(const fs::path& repo, std::vector<std::string> args) {
  args.insert(args.begin(), {"git", "-C", repo.string()});
  auto r = run_tool(args, git_timeout, current_environment(), true);
  if (!r) return r.error();
  if (r->timed_out || !WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0)
    return core::status(core::errc::invalid_argument, detail::shell_join(args) + ": " +
                                                         (r->errors.empty() ? std::string("failed") : r->errors));
  std::string out = r->output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// The worktrees of one bisect: in a temporary folder outside the checkout, each removed after
// its commit was measured, the folder at the end.
class worktrees {
 public:
  explicit worktrees(fs::path repo) : repo_(std::move(repo)) {
    std::string pattern = (fs::temp_directory_path() / "faultline-bisect-XXXXXX").string();
    if (::mkdtemp(pattern.data())) root_ = pattern;
  }
  ~worktrees() {
    std::error_code ec;
    if (root_.empty()) return;
    fs::remove_all(root_, ec);
    (void)git(repo_, {"worktree", "prune"});
  }
  worktrees(const worktrees&) = delete;
  worktrees& operator=(const worktrees&) = delete;

  core::result<fs::path> add(const std::string& commit) {
    if (root_.empty()) return core::status(core::errc::io_error, "cannot create a temporary folder for the worktrees");
    const fs::path wt = root_ / commit.substr(0, 12);
    if (auto r = git(repo_, {"worktree", "add", "--detach", wt.string(), commit}); !r)
      return core::status(core::errc::io_error, r.error().message());
    return wt;
  }
  void remove(const fs::path& wt) {
    if (!git(repo_, {"worktree", "remove", "--force", wt.string()})) {
      std::error_code ec;
      fs::remove_all(wt, ec);
    }
  }

 private:
  fs::path repo_;
  fs::path root_;
};

// The state of one bisect while it runs.
struct bisector {
  const bisect_options& o;
  worktrees trees;
  sampler runs;
  bisect_result r;
  reports::proportion good_ref, bad_ref;

  bool cancelled() const { return o.run_settings.cancel && o.run_settings.cancel->load(); }
  bool counts(const run_record& x) const {
    if (x.result == outcome::pass) return false;
    return !o.signature || x.signature.find(*o.signature) != std::string::npos;
  }

  // Builds the commit in `wt`; "" when it built, else why not.
  std::string build(const fs::path& wt) {
    if (o.build.empty()) return "";
    auto b = run_tool({"/bin/sh", "-c", "cd " + detail::shell_quote(wt.string()) + " && " + o.build}, o.build_timeout);
    if (!b) return b.error().message();
    if (b->timed_out) return "the build ran past its timeout";
    if (!WIFEXITED(b->status) || WEXITSTATUS(b->status) != 0) {
      std::string tail = b->output.size() > 400 ? b->output.substr(b->output.size() - 400) : b->output;
      return "the build failed: " + tail;
    }
    return "";
  }

  // The verdict of `s` at this look; "" while undecided.
  std::string judge(bisect_step& s, std::uint64_t looks) const {
    const reports::proportion now{s.failures, s.runs};
    s.p_like_bad = reports::fisher_greater(good_ref, now);
    s.p_like_good = reports::fisher_greater(now, bad_ref);
    const double a = o.alpha / static_cast<double>(looks);
    if (s.p_like_bad < a && s.p_like_good >= a) return "bad";
    if (s.p_like_good < a && s.p_like_bad >= a) return "good";
    return "";
  }

  // Why the command's program cannot be started in `wt` ("" when it can): exec's check
  // (find_program), with a relative path looked up in the worktree, where the shell that runs
  // the command looks for it; the message names the program as the user wrote it.
  std::string cannot_run(const fs::path& wt) const {
    if (o.program.empty()) return "";
    const bool in_worktree = o.program.find('/') != std::string::npos && o.program.front() != '/';
    auto found = find_program(in_worktree ? (wt / o.program).string() : o.program);
    if (found) return "";
    std::string why = found.error().message();
    const std::string prefix = (wt / "").string();
    if (in_worktree && why.compare(0, prefix.size(), prefix) == 0) why.erase(0, prefix.size());
    return why;
  }

  // A commit checked out and built, ready to run (`wt`), or skipped (`wt` empty, the step says why).
  struct prepared {
    bisect_step step;
    fs::path wt;
    std::string cannot_run;  // skipped because the program cannot be started there: why
  };

  core::result<prepared> prepare(const std::string& commit, const std::string& role) {
    auto subject = git(o.repo, {"log", "-1", "--format=%s", commit});
    prepared p;
    p.step.commit = commit;
    p.step.subject = subject ? *subject : std::string();
    p.step.role = role;
    p.step.verdict = "undecided";
    auto wt = trees.add(commit);
    if (!wt) return wt.error();
    std::string why = build(*wt);
    if (why.empty() && !(p.cannot_run = cannot_run(*wt)).empty()) why = "the command cannot be run: " + p.cannot_run;
    if (!why.empty()) {
      trees.remove(*wt);
      p.step.verdict = "skip";
      p.step.why = why;
      return p;
    }
    p.wt = *wt;
    return p;
  }

  // Runs the command in a prepared worktree, then removes it: all `runs` runs for an endpoint,
  // batches until decided else.
  core::result<bisect_step> sample(prepared p) {
    bisect_step& s = p.step;
    const std::string& role = s.role;
    const variant v = o.make_variant(p.wt);
    const std::uint64_t looks = (o.runs + o.batch - 1) / o.batch;
    while (s.runs < o.runs && !cancelled()) {
      const std::uint64_t n = role == "step" ? std::min(o.batch, o.runs - s.runs) : o.runs;
      auto got = runs.sample(v, o.seed + s.runs, n, [this](const run_record& x) { return counts(x); });
      if (!got) {
        trees.remove(p.wt);
        return got.error();
      }
      s.runs += got->runs;
      s.failures += got->hits;
      if (got->interrupted || got->runs == 0) break;
      if (role != "step") continue;
      if (std::string verdict = judge(s, looks); !verdict.empty()) {
        s.verdict = verdict;
        break;
      }
    }
    trees.remove(p.wt);
    if (role != "step") s.verdict = role;
    else if (s.verdict == "undecided") s.why = cancelled() ? "interrupted" : "neither like good nor like bad after " + counted(s.runs, "run");
    return s;
  }

  // A commit between the endpoints, from checkout to verdict.
  core::result<bisect_step> measure(const std::string& commit) {
    auto p = prepare(commit, "step");
    if (!p) return p.error();
    if (p->wt.empty()) return p->step;
    return sample(std::move(*p));
  }

  core::status record(const bisect_step& s) {
    r.steps.push_back(s);
    if (o.on_step) o.on_step(s);
    return save();
  }

  // bisect.json, replaced whole (state_file.h) after every commit and at the end: a reader, or a
  // bisect killed while it writes, never leaves half of one.
  core::status save() const { return write_state_file(o.out_dir / bisect_file, nlohmann::json(to_record(r, o))); }

  core::result<std::vector<prepared>> prepare_endpoints(const std::string& good, const std::string& bad);
  core::status endpoints(std::vector<prepared> ends);
  core::status search(const std::vector<std::string>& commits);
};

// Both endpoints checked out and built before either runs, so a program that cannot be started
// at either is refused before any run (as exec refuses it): without that, every run fails with
// the shell's "not found" and the answer would blame the statistics.
core::result<std::vector<bisector::prepared>> bisector::prepare_endpoints(const std::string& good, const std::string& bad) {
  std::vector<prepared> ends;
  for (const auto& [commit, role] : {std::pair{good, "good"}, std::pair{bad, "bad"}}) {
    auto p = prepare(commit, role);
    if (!p) return p.error();
    if (!p->cannot_run.empty()) {
      for (auto& e : ends)
        if (!e.wt.empty()) trees.remove(e.wt);
      return core::status(core::errc::invalid_argument,
                          std::string("the command cannot be run at the ") + role + " revision (" + commit.substr(0, 12) + "): " +
                              p->cannot_run +
                              (o.build.empty() ? " (without --build, a worktree holds only the files its commit tracks)" : ""));
    }
    const bool skipped = p->wt.empty();
    ends.push_back(std::move(*p));
    if (skipped) break;  // did not build: the bisect stops there
  }
  return ends;
}

core::status bisector::endpoints(std::vector<prepared> ends) {
  for (auto& p : ends)
    if (p.wt.empty()) {  // did not build: nothing runs
      r.problem = "the " + p.step.role + " revision did not build: " + p.step.why;
      for (auto& e : ends)
        if (!e.wt.empty()) trees.remove(e.wt);
      return record(p.step);
    }
  for (auto& p : ends) {
    const std::string role = p.step.role;
    if (cancelled()) {
      trees.remove(p.wt);
      continue;
    }
    auto s = sample(p);
    if (!s) return s.error();
    (role == "good" ? good_ref : bad_ref) = {s->failures, s->runs};
    if (auto w = record(*s); !w) return w;
  }
  if (cancelled()) return {};
  const double p = reports::fisher_greater(good_ref, bad_ref);
  if (!(p < o.alpha))
    r.problem = "the bad revision's rate (" + std::to_string(bad_ref.failures) + "/" + std::to_string(bad_ref.runs) +
                ") is not greater than the good one's (" + std::to_string(good_ref.failures) + "/" +
                std::to_string(good_ref.runs) + ") at alpha " + std::to_string(o.alpha) + " (p = " + std::to_string(p) +
                "): more --runs, or revisions further apart";
  return {};
}

// Binary search over commits (good excluded, bad included): lo is the last known good index
// (-1: the good revision), hi the first known bad; a skipped or undecided commit is passed over
// for the untested one nearest the middle.
core::status bisector::search(const std::vector<std::string>& commits) {
  std::vector<std::string> state(commits.size());
  long lo = -1, hi = static_cast<long>(commits.size()) - 1;
  while (hi - lo > 1 && !cancelled()) {
    const long mid = (lo + hi) / 2;
    long pick = -1;
    for (long d = 0; pick < 0 && d < hi - lo; ++d)
      for (long c : {mid - d, mid + d + 1})
        if (pick < 0 && c > lo && c < hi && state[static_cast<std::size_t>(c)].empty()) pick = c;
    if (pick < 0) break;
    auto s = measure(commits[static_cast<std::size_t>(pick)]);
    if (!s) return s.error();
    state[static_cast<std::size_t>(pick)] = s->verdict;
    if (auto w = record(*s); !w) return w;
    if (s->verdict == "bad") hi = pick;
    if (s->verdict == "good") lo = pick;
  }
  r.interrupted = cancelled();
  if (hi - lo == 1 && !r.interrupted) r.first_bad = commits[static_cast<std::size_t>(hi)];
  else
    for (long c = lo + 1; c <= hi; ++c) r.undecided_range.push_back(commits[static_cast<std::size_t>(c)]);
  return {};
}

}  // namespace

core::result<std::pair<std::string, std::string>> resolve_revisions(const fs::path& repo, const std::string& good,
                                                                   const std::string& bad) {
  if (auto top = git(repo, {"rev-parse", "--show-toplevel"}); !top)
    return core::status(core::errc::invalid_argument, repo.string() + " is not a git checkout");
  auto g = git(repo, {"rev-parse", "--verify", "--quiet", good + "^{commit}"});
  if (!g) return core::status(core::errc::invalid_argument, "--good '" + good + "' names no commit");
  auto b = git(repo, {"rev-parse", "--verify", "--quiet", bad + "^{commit}"});
  if (!b) return core::status(core::errc::invalid_argument, "--bad '" + bad + "' names no commit");
  if (*g == *b) return core::status(core::errc::invalid_argument, "--good and --bad name the same commit");
  if (!git(repo, {"merge-base", "--is-ancestor", *g, *b}))
    return core::status(core::errc::invalid_argument, "--good " + good + " is not an ancestor of --bad " + bad);
  return std::pair{*g, *b};
}

core::result<bisect_result> run_bisect(const bisect_options& o) {
  auto revs = resolve_revisions(o.repo, o.good, o.bad);
  if (!revs) return revs.error();
  if (o.runs == 0 || o.batch == 0 || !(o.alpha > 0 && o.alpha < 1) || !o.make_variant)
    return core::status(core::errc::invalid_argument, "bisect: runs and batch must be positive, alpha in (0, 1)");
  auto list = git(o.repo, {"rev-list", "--reverse", "--ancestry-path", revs->first + ".." + revs->second});
  if (!list) return list.error();
  std::vector<std::string> commits;
  for (std::size_t at = 0; at < list->size();) {
    auto nl = list->find('\n', at);
    if (nl == std::string::npos) nl = list->size();
    if (nl > at) commits.push_back(list->substr(at, nl - at));
    at = nl + 1;
  }
  // A folder of its own, held while the bisect writes into it: a campaign there would be read
  // back with the bisect's samples, and a second bisect would replace its bisect.json.
  std::error_code exists_ec;
  const bool out_existed = fs::exists(o.out_dir, exists_ec);
  std::optional<out_dir_lock> out_lock;
  if (auto l = out_dir_lock::acquire(o.out_dir); l) {  // creates the folder
    out_lock.emplace(std::move(*l));
  } else {
    return l.error();
  }
  auto held = find_recorded_campaign(o.out_dir);
  if (!held) return held.error();
  if (held->any())
    return core::status(core::errc::already_exists,
                        o.out_dir.string() + " holds " + held->describe(o.out_dir) + ": give the bisect a folder of its own");
  bisector b{o, worktrees(o.repo), sampler(o.run_settings, o.out_dir / "samples"), {}, {}, {}};
  b.r.commits = commits.size();
  auto ends = b.prepare_endpoints(revs->first, revs->second);
  if (!ends) {
    // Refused before any run: a folder made for it goes again, as if never asked for.
    out_lock.reset();
    std::error_code ec;
    if (!out_existed) fs::remove_all(o.out_dir, ec);
    return ends.error();
  }
  if (auto s = b.endpoints(std::move(*ends)); !s) return s;
  if (!b.r.problem.empty() || b.cancelled()) {
    b.r.interrupted = b.cancelled();
    return b.r;
  }
  if (auto s = b.search(commits); !s) return s;
  if (auto s = b.save(); !s) return s;  // with the answer
  return b.r;
}

bisect_record to_record(const bisect_result& r, const bisect_options& o) {
  bisect_record j;
  j.good = o.good;
  j.bad = o.bad;
  j.alpha = o.alpha;
  j.runs = o.runs;
  j.batch = o.batch;
  j.seed = o.seed;
  j.signature = o.signature;
  j.commits = r.commits;
  j.steps = r.steps;
  j.first_bad = r.first_bad;
  j.undecided_range = r.undecided_range;
  j.problem = r.problem;
  j.interrupted = r.interrupted;
  return j;
}

}  // namespace faultline::harness
