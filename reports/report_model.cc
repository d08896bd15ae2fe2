#include "reports/report_model.h"

#include <algorithm>
#include <memory>
#include <set>
#include <system_error>
#include <unordered_map>

#include "core/file_io.h"
#include "reports/detail/text.h"

namespace faultline::reports {
namespace {

namespace fs = std::filesystem;
using harness::outcome;
using harness::run_record;

constexpr const char* results_name = "results.jsonl";
constexpr const char* manifest_name = "campaign.json";
// How far below a directory given on the command line results files are looked for: deep
// enough for ARTIFACTS/shard-3/faultline-out/results.jsonl.
constexpr int search_depth = 4;

// Campaign ids in run identities: 1.. for campaigns known by their manifest; `by_time` for runs
// of files without one (identified by their start time); by_file + file index for those whose
// start time does not parse either (never deduplicated across files).
constexpr std::uint64_t by_time = 0;
constexpr std::uint64_t by_file = std::uint64_t{1} << 40;

struct run_identity {
  std::uint64_t campaign = 0;
  std::uint64_t variant = 0;
  std::uint64_t seed = 0;
  std::uint64_t run = 0;
  std::int64_t start_ms = 0;  // only for campaign == by_time
  bool operator==(const run_identity&) const = default;
};

struct identity_hash {
  std::size_t operator()(const run_identity& k) const noexcept {
    std::uint64_t h = 1469598103934665603ULL;
    for (std::uint64_t v : {k.campaign, k.variant, k.seed, k.run, static_cast<std::uint64_t>(k.start_ms)}) {
      h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return static_cast<std::size_t>(h);
  }
};

// The first reading of a run: where, and how it ended.
struct first_reading {
  std::uint32_t file = 0;
  outcome result = outcome::pass;
};

// One variant while the files are read.
struct variant_state {
  std::string name;  // as its first run recorded it
  harness::variant_identity id;
  std::string faults, key;  // key: the builder's name for it, unique per (id, faults)
  harness::summary_builder builder;
  std::vector<std::int64_t> durations;
  std::set<std::uint32_t> files;
  std::uint32_t first_file = 0;
  std::uint64_t first_run = 0;

  variant_state(std::string n, harness::variant_identity i, std::string f, std::string k)
      // A soak's label is no spec: its runs' points are not checked against it.
      : name(std::move(n)), id(std::move(i)), faults(std::move(f)), key(std::move(k)),
        builder({{key, faults == soak_faults_label ? std::string() : faults}}) {}
};

// The campaign a results file belongs to, from the campaign.json beside it.
struct manifest_info {
  std::string key;  // the manifest less its shard: the same for every shard of one campaign
  harness::shard part;
};

std::optional<manifest_info> read_manifest_info(const fs::path& dir, std::vector<std::string>& notes) {
  const fs::path path = dir / manifest_name;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  auto text = core::io::read_file(path, 16 << 20);
  std::string why;
  if (text) {
    try {
      auto j = nlohmann::json::parse(*text);
      auto part = harness::parse_shard(j.at("shard").get<std::string>());
      if (part) {
        j.erase("shard");
        return manifest_info{j.dump(), *part};
      }
      why = part.error().message();
    } catch (const nlohmann::json::exception& e) {
      why = e.what();
    }
  } else {
    why = text.error().message();
  }
  notes.push_back(path.string() + " is not a campaign manifest (" + detail::one_line(why) +
                  "): its runs are told apart by their start time");
  return std::nullopt;
}

std::string plural(std::uint64_t n, const char* one, const char* many) { return detail::counted(n, one, many); }

duration_stats duration_spread(std::vector<std::int64_t>& d) {
  duration_stats s;
  if (d.empty()) return s;
  std::sort(d.begin(), d.end());
  // Nearest-rank quantiles: each is a duration some run had.
  auto q = [&](double p) {
    std::size_t rank = static_cast<std::size_t>(p * static_cast<double>(d.size()) + 0.999999);
    return d[std::min(d.size() - 1, rank == 0 ? 0 : rank - 1)];
  };
  s.count = d.size();
  s.min_ms = d.front();
  s.max_ms = d.back();
  s.q1_ms = q(0.25);
  s.median_ms = q(0.5);
  s.q3_ms = q(0.75);
  s.p99_ms = q(0.99);
  long double sum = 0;
  for (auto v : d) sum += static_cast<long double>(v);
  s.total_ms = static_cast<std::int64_t>(sum);
  s.mean_ms = static_cast<double>(sum / static_cast<long double>(d.size()));
  return s;
}

// The program of a command shown with its last `parts` path components ("v1/exit_race").
std::string program_tail(const std::string& program, std::size_t parts) {
  std::size_t at = program.size();
  for (std::size_t i = 0; i < parts && at != std::string::npos && at > 0; ++i) at = program.rfind('/', at - 1);
  return at == std::string::npos || parts == 0 ? program : program.substr(at + 1);
}

std::size_t path_parts(const std::string& program) {
  return static_cast<std::size_t>(std::count(program.begin(), program.end(), '/')) + 1;
}

std::string describe_rate(const harness::rate_estimate& r) {
  return detail::percent(r.rate) + ", 95% CI " + detail::percent(r.lower95) + "-" + detail::percent(r.upper95);
}

// The verdict of a variant, and whether it met its expectation.
void judge(variant_report& v) {
  const auto& s = v.summary;
  v.errors = s.outcomes.count(outcome::error) ? s.outcomes.at(outcome::error) : 0;
  if (v.expect == expectation::no_failure) {
    v.bad = s.failures;
    v.rate = s.rate;
    v.ok = s.failures == 0;
    v.verdict = v.ok ? "no failure in " + plural(s.runs, "run", "runs") + " (rate <= " + detail::percent(s.rate.upper95) + " at 95%)"
                     : detail::thousands(s.failures) + " of " + plural(s.runs, "run", "runs") + " failed (" + describe_rate(s.rate) + ")";
    return;
  }
  v.detections = s.failures - v.errors;
  v.bad = s.runs - v.detections;
  v.rate = harness::failure_rate(v.detections, s.runs);
  v.ok = v.detections > 0 && v.errors == 0;
  if (v.detections == 0) v.verdict = "bug point never detected in " + plural(s.runs, "run", "runs");
  else v.verdict = "bug point detected in " + detail::thousands(v.detections) + " of " + plural(s.runs, "run", "runs") + " (" + describe_rate(v.rate) + ")";
  if (v.errors) v.verdict += "; " + plural(v.errors, "run", "runs") + " could not be performed (error)";
}

// Widths a timeline bucket may have, so that its ticks read well.
constexpr std::int64_t bucket_widths_ms[] = {
    1'000,      2'000,      5'000,      10'000,     15'000,      30'000,      60'000,      120'000,
    300'000,    600'000,    900'000,    1'800'000,  3'600'000,   7'200'000,   10'800'000,  21'600'000,
    43'200'000, 86'400'000, 172'800'000, 604'800'000};
constexpr std::int64_t max_buckets = 120;

timeline make_timeline(std::vector<std::pair<std::int64_t, outcome>>& starts) {
  timeline t;
  if (starts.empty()) return t;
  std::sort(starts.begin(), starts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  t.first_ms = starts.front().first;
  t.last_ms = starts.back().first;
  const std::int64_t span = t.last_ms - t.first_ms;
  t.bucket_ms = bucket_widths_ms[std::size(bucket_widths_ms) - 1];
  for (std::int64_t w : bucket_widths_ms) {
    if (span / w < max_buckets) {
      t.bucket_ms = w;
      break;
    }
  }
  // A span longer than the widest width's 120 buckets gets wider buckets still.
  while (span / t.bucket_ms >= max_buckets) t.bucket_ms *= 2;
  const std::int64_t origin = t.first_ms - t.first_ms % t.bucket_ms;
  const std::size_t count = static_cast<std::size_t>((t.last_ms - origin) / t.bucket_ms) + 1;
  t.buckets.resize(count);
  for (std::size_t i = 0; i < count; ++i) t.buckets[i].start_ms = origin + static_cast<std::int64_t>(i) * t.bucket_ms;
  for (const auto& [ms, o] : starts) ++t.buckets[static_cast<std::size_t>((ms - origin) / t.bucket_ms)].runs[o];
  return t;
}

}  // namespace

std::string_view to_string(expectation e) noexcept {
  return e == expectation::detection ? "detection" : "no-failure";
}

std::optional<expectation> expectation_from_string(std::string_view s) noexcept {
  if (s == "detection") return expectation::detection;
  if (s == "no-failure") return expectation::no_failure;
  return std::nullopt;
}

bool plants_bug_point(std::string_view faults) {
  // Read lexically rather than with faults::parse, which accepts only the bug points this build
  // knows: results may come from another build, or from a scenario binary with points of its own.
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  while (!faults.empty()) {
    const std::size_t semi = faults.find(';');
    std::string_view item = faults.substr(0, semi);
    faults = semi == std::string_view::npos ? std::string_view() : faults.substr(semi + 1);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || trim(item.substr(0, eq)).rfind("bug/", 0) != 0) continue;
    std::string_view terms = item.substr(eq + 1);
    while (!terms.empty()) {
      const std::size_t arrow = terms.find("->");
      std::string_view term = trim(terms.substr(0, arrow));
      terms = arrow == std::string_view::npos ? std::string_view() : terms.substr(arrow + 2);
      // [P%] [N*] action[(args)]: skip the probability and count, read the action's name.
      for (char mark : {'%', '*'}) {
        const std::size_t at = term.find(mark);
        if (at != std::string_view::npos && term.find('(') > at) term = trim(term.substr(at + 1));
      }
      std::size_t len = 0;
      while (len < term.size() && term[len] >= 'a' && term[len] <= 'z') ++len;
      if (len && term.substr(0, len) != "off") return true;
    }
  }
  return false;
}

std::string repro_command(const run_record& r) {
  std::string flags = " --seed " + std::to_string(r.seed) + " --repeat 1";
  if (!r.faults.empty()) flags += " --faults " + core::io::shell_quote(r.faults);
  // The options that changed what the run did (--timeout, --env, --no-preload, ...), as the
  // command that made it recorded them: without its --timeout a replayed hang waits 10 minutes.
  for (const auto& word : r.replay) flags += " " + core::io::shell_quote(word);
  // A scenario's runs are the scenario binary's `run NAME`, under the scenario's name (verify's
  // bug variants add "@POINT").
  const auto& c = r.command;
  if (harness::identity_of(r).kind == harness::variant_kind::scenario) {
    if (c.size() == 3 && c[1] == "run") return "faultline run " + core::io::shell_quote(c[2]) + flags;
    return c.empty() ? "" : "faultline run " + core::io::shell_quote(r.name.substr(0, r.name.find('@'))) + flags;
  }
  if (c.empty()) return "";
  return "faultline exec" + flags + " -- " + core::io::shell_join(c);
}

std::vector<std::string> display_names(const std::vector<harness::variant_identity>& ids, const std::vector<std::string>& names) {
  // Each command starts at its recorded name and is lengthened, step by step, only while it
  // shares its name with another identity: by its program's path while the programs sharing the
  // name differ, else by its arguments, else (a scenario of the same name) by the whole command
  // line. Every step moves some command on along that finite way, so this ends.
  struct shape {
    std::size_t parts = 0;  // path components of the program shown; 0: the recorded name
    bool args = false;      // its arguments shown
    bool whole = false;     // the whole command line, marked as a command's
  };
  const std::size_t n = ids.size();
  std::vector<shape> how(n);
  auto is_command = [&](std::size_t i) { return ids[i].kind == harness::variant_kind::command && !ids[i].what.empty(); };
  auto shown = [&](std::size_t i) -> std::string {
    if (!is_command(i)) return ids[i].what.empty() ? std::string() : ids[i].what.front();
    const auto& argv = ids[i].what;
    if (how[i].whole) return core::io::shell_join(argv) + " (command)";
    std::string text = how[i].parts == 0 ? (i < names.size() && !names[i].empty() ? names[i] : program_tail(argv[0], 1))
                                         : program_tail(argv[0], how[i].parts);
    if (how[i].args && argv.size() > 1)
      text += " " + core::io::shell_join(std::vector<std::string>(argv.begin() + 1, argv.end()));
    return text;
  };
  for (bool changed = true; changed;) {
    std::map<std::string, std::vector<std::size_t>> sharing;
    for (std::size_t i = 0; i < n; ++i) sharing[shown(i)].push_back(i);
    changed = false;
    for (const auto& [text, group] : sharing) {
      if (group.size() < 2) continue;
      std::vector<std::size_t> commands;
      std::set<std::string> programs;
      for (auto i : group)
        if (is_command(i)) {
          commands.push_back(i);
          programs.insert(ids[i].what[0]);
        }
      bool step = false;
      if (programs.size() > 1) {
        for (auto i : commands)
          if (how[i].parts < path_parts(ids[i].what[0])) {
            ++how[i].parts;
            step = true;
          }
      }
      if (!step)
        for (auto i : commands)
          if (!how[i].args && ids[i].what.size() > 1) how[i].args = step = true;
      if (!step)
        for (auto i : commands)
          if (!how[i].whole) how[i].whole = step = true;
      changed = changed || step;
    }
  }
  std::vector<std::string> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.push_back(shown(i));
  return out;
}

bool report_model::ok() const { return failed_variants() == 0; }

std::uint64_t report_model::failed_variants() const {
  return static_cast<std::uint64_t>(std::count_if(variants.begin(), variants.end(), [](const auto& v) { return !v.ok; }));
}

core::result<std::vector<fs::path>> find_results(const std::vector<fs::path>& paths) {
  std::vector<fs::path> out;
  for (const auto& p : paths) {
    std::error_code ec;
    const auto st = fs::status(p, ec);
    if (!fs::exists(st)) return core::status(core::errc::not_found, p.string() + ": no such file or directory");
    if (!fs::is_directory(st)) {
      out.push_back(p);
      continue;
    }
    if (fs::is_regular_file(p / results_name, ec)) {
      out.push_back(p / results_name);
      continue;
    }
    // A directory of shard outputs: every results file below it, not looking inside a
    // campaign's own directory once its results file is found.
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(p, fs::directory_options::skip_permission_denied, ec), end;
    if (ec) return core::status(core::errc::io_error, "list " + p.string() + ": " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) return core::status(core::errc::io_error, "list " + p.string() + ": " + ec.message());
      std::error_code e2;
      if (!it->is_directory(e2) || it->is_symlink(e2)) continue;
      if (fs::is_regular_file(it->path() / results_name, e2)) {
        found.push_back(it->path() / results_name);
        it.disable_recursion_pending();
      } else if (it.depth() + 1 >= search_depth) {
        it.disable_recursion_pending();
      }
    }
    if (found.empty())
      return core::status(core::errc::not_found, p.string() + " holds no " + results_name + " (nor does any directory under it, " +
                                                     std::to_string(search_depth) + " levels down)");
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

core::result<report_model> load_report(const std::vector<fs::path>& paths) {
  if (paths.empty()) return core::status(core::errc::invalid_argument, "no results given");
  auto files = find_results(paths);
  if (!files) return files.error();

  report_model m;
  std::map<std::pair<harness::variant_identity, std::string>, std::size_t> variant_of;  // (identity, faults) -> index
  std::vector<std::unique_ptr<variant_state>> states;
  std::unordered_map<run_identity, first_reading, identity_hash> seen;
  std::map<std::string, std::uint64_t> campaign_of;  // manifest key -> campaign id
  // Per campaign id with a manifest: the shards read, and the file that named it first.
  std::map<std::uint64_t, std::map<std::uint64_t, std::set<std::uint64_t>>> shards_read;  // id -> count -> indexes
  std::map<std::uint64_t, fs::path> campaign_first_file;
  // (file, earlier file) -> runs of `file` already read from `earlier`, and how many differ.
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::pair<std::uint64_t, std::uint64_t>> dup;
  std::vector<std::pair<std::int64_t, outcome>> starts;
  std::uint64_t without_time = 0;
  std::map<std::string, std::size_t> canonical_seen;

  for (const auto& file : *files) {
    std::error_code ec;
    const std::string canonical = fs::weakly_canonical(file, ec).string();
    if (auto it = canonical_seen.find(canonical); it != canonical_seen.end()) {
      m.notes.push_back(file.string() + " was given more than once: read once");
      continue;
    }
    canonical_seen.emplace(canonical, m.inputs.size());
    const auto file_index = static_cast<std::uint32_t>(m.inputs.size());
    input_report in;
    in.results = file;
    const fs::path dir = file.parent_path();
    auto manifest = read_manifest_info(dir.empty() ? fs::path(".") : dir, m.notes);
    std::uint64_t campaign = by_time;
    if (manifest) {
      auto [it, fresh] = campaign_of.emplace(manifest->key, campaign_of.size() + 1);
      campaign = it->second;
      in.shard = manifest->part;
      shards_read[campaign][manifest->part.count].insert(manifest->part.index);
      if (fresh) campaign_first_file[campaign] = file;
    }

    // A soak draws a fault spec per run from each scenario's space: its runs of scenarios are
    // grouped by scenario (one variant per spec would be one per run), under the spec label
    // below. A soak of a command gives each run the command's own spec, and is grouped by it.
    const bool soak = fs::exists((dir.empty() ? fs::path(".") : dir) / "soak.json", ec);
    auto visit = [&](run_record&& r, std::uint64_t) -> core::status {
      ++in.records;
      harness::variant_identity what = harness::identity_of(r);
      const std::string group_faults =
          soak && what.kind == harness::variant_kind::scenario ? std::string(soak_faults_label) : r.faults;
      auto [vit, fresh] = variant_of.emplace(std::make_pair(what, group_faults), states.size());
      if (fresh) {
        states.push_back(std::make_unique<variant_state>(r.name, std::move(what), group_faults, std::to_string(states.size())));
        states.back()->first_file = file_index;
        states.back()->first_run = r.run;
      }
      variant_state& st = *states[vit->second];
      const std::int64_t start = detail::parse_iso_utc_ms(r.timestamp);
      run_identity id{campaign, vit->second, r.seed, r.run, 0};
      if (campaign == by_time) {
        if (start >= 0) id.start_ms = start;
        else id.campaign = by_file + file_index;
      }
      auto [sit, first] = seen.emplace(id, first_reading{file_index, r.result});
      if (!first) {
        auto& d = dup[{file_index, sit->second.file}];
        ++d.first;
        if (sit->second.result != r.result) ++d.second;
        ++in.duplicates;
        return {};
      }
      ++in.counted;
      if (st.first_file == file_index) st.first_run = std::min(st.first_run, r.run);
      st.files.insert(file_index);
      st.durations.push_back(r.duration_ms);
      if (start >= 0) starts.emplace_back(start, r.result);
      else ++without_time;
      // Paths in a record are relative to its results file's directory; the reports name them
      // from where they were read.
      if (!r.log.empty()) r.log = (dir / r.log).lexically_normal().string();
      if (!r.stacks.empty()) r.stacks = (dir / r.stacks).lexically_normal().string();
      r.name = st.key;
      st.builder.add(r);
      return {};
    };
    auto scan = harness::scan_results(file, visit);
    if (!scan) {
      if (scan.code() == core::errc::not_found) return core::status(core::errc::not_found, file.string() + ": no such file");
      return scan.error();
    }
    in.torn_tail = scan->truncated_tail;
    if (in.torn_tail)
      m.notes.push_back(file.string() + ": its last line is torn (the harness was killed while writing it): that run is not counted");
    if (in.records == 0) m.notes.push_back(file.string() + ": holds no run");
    m.runs += in.counted;
    m.duplicates += in.duplicates;
    m.inputs.push_back(std::move(in));
  }
  if (m.runs == 0) {
    std::string names;
    for (std::size_t i = 0; i < m.inputs.size() && i < 3; ++i) names += (i ? ", " : "") + m.inputs[i].results.string();
    if (m.inputs.size() > 3) names += ", ...";
    return core::status(core::errc::invalid_argument, "no runs recorded in " + names);
  }

  for (const auto& [files_pair, counts] : dup) {
    const auto& [file, earlier] = files_pair;
    const auto& in = m.inputs[file];
    std::string note = in.results.string() + ": " + detail::thousands(counts.first) + " of its " + plural(in.records, "run", "runs") +
                       (counts.first == 1 ? " was" : " were") + " already read from " + m.inputs[earlier].results.string();
    note += file == earlier ? " (recorded twice in it)" : " (the same shard given twice?)";
    note += ": counted once";
    if (counts.second)
      note += "; " + detail::thousands(counts.second) + " of them recorded with another outcome there, whose reading is kept";
    m.notes.push_back(note);
  }
  for (const auto& [campaign, by_count] : shards_read) {
    for (const auto& [count, indexes] : by_count) {
      if (count < 2 || indexes.size() == count) continue;
      std::string missing;
      std::uint64_t shown = 0, absent = 0;
      for (std::uint64_t i = 0; i < count; ++i) {
        if (indexes.count(i)) continue;
        ++absent;
        if (shown++ < 8) missing += (missing.empty() ? "" : ", ") + std::to_string(i) + "/" + std::to_string(count);
      }
      if (absent > shown) missing += ", ...";
      m.notes.push_back("the campaign of " + campaign_first_file[campaign].string() + " was sharded " + std::to_string(count) +
                        " ways and " + plural(indexes.size(), "shard was", "shards were") + " read: " + plural(absent, "shard", "shards") +
                        " missing (" + missing + "), whose runs are not in this report");
    }
  }
  if (without_time)
    m.notes.push_back(plural(without_time, "run has", "runs have") + " no readable start time and " +
                      (without_time == 1 ? "is" : "are") + " left out of the timeline");

  // Labels: each identity's display name, told apart by its spec where it ran with several.
  std::map<harness::variant_identity, std::size_t> identity_index;
  std::vector<harness::variant_identity> identities;
  std::vector<std::string> recorded_names;
  std::vector<int> specs_of_identity;
  for (const auto& st : states) {
    auto [it, fresh] = identity_index.emplace(st->id, identities.size());
    if (fresh) {
      identities.push_back(st->id);
      recorded_names.push_back(st->name);
      specs_of_identity.push_back(0);
    }
    ++specs_of_identity[it->second];
  }
  const std::vector<std::string> shown = display_names(identities, recorded_names);
  std::vector<std::size_t> order(states.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (states[a]->first_file != states[b]->first_file) return states[a]->first_file < states[b]->first_file;
    if (states[a]->first_run != states[b]->first_run) return states[a]->first_run < states[b]->first_run;
    return a < b;
  });
  for (std::size_t i : order) {
    variant_state& st = *states[i];
    variant_report v;
    v.name = st.name;
    v.id = st.id;
    v.faults = st.faults;
    const std::size_t k = identity_index.at(st.id);
    v.label = specs_of_identity[k] > 1 ? shown[k] + " [" + (st.faults.empty() ? "no faults" : st.faults) + "]" : shown[k];
    v.expect = plants_bug_point(st.faults) ? expectation::detection : expectation::no_failure;
    v.summary = st.builder.summaries().front();
    v.summary.name = v.label;
    // The builder knew the variant by its key; its records go back to their recorded name.
    for (auto* r : {&v.summary.first_failure, &v.summary.first_pass, &v.summary.first_record})
      if (*r) (*r)->name = v.name;
    judge(v);
    const auto& pick = v.expect == expectation::no_failure
                           ? v.summary.first_failure
                           : (v.summary.first_pass ? v.summary.first_pass : v.summary.first_record);
    if (pick) {
      v.repro = repro_command(*pick);
      v.repro_what = v.expect == expectation::no_failure ? "the first failure"
                     : v.summary.first_pass                ? "a run that missed the bug"
                                                           : "the first run";
    }
    v.durations = duration_spread(st.durations);
    for (auto f : st.files) v.sources.push_back(m.inputs[f].results.string());
    m.variants.push_back(std::move(v));
  }
  m.time = make_timeline(starts);
  for (const auto& p : paths) {  // what shrink and bisect left beside the results
    std::error_code ec;
    if (!fs::is_directory(p, ec)) continue;
    auto t = harness::find_triage_records(p);
    if (!t) {
      m.notes.push_back(t.error().message());
      continue;
    }
    m.shrinks.insert(m.shrinks.end(), t->shrinks.begin(), t->shrinks.end());
    if (t->bisect) m.bisects.push_back(std::move(*t->bisect));
  }
  return m;
}

}  // namespace faultline::reports
