#include "harness/cli_faults.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "faults/families.h"
#include "faults/point_names.h"
#include "harness/run/elf_functions.h"

namespace faultline::harness {

namespace fs = std::filesystem;

// Which libraries and roles a spec needs: the families of faults/families.h.
bool names_cuda_runtime(const faults::spec& spec) {
  return std::any_of(spec.items.begin(), spec.items.end(),
                     [](const faults::item& i) { return faults::pattern_reaches(i.point, faults::family_named("cuda/cuda")); });
}

bool names_lock_points(const faults::spec& spec) {
  return std::any_of(spec.items.begin(), spec.items.end(),
                     [](const faults::item& i) { return faults::pattern_reaches(i.point, faults::injector::lock); });
}

bool names_posix_points(const faults::spec& spec) {
  return std::any_of(spec.items.begin(), spec.items.end(),
                     [](const faults::item& i) { return faults::pattern_reaches(i.point, faults::injector::posix); });
}

namespace {

// "off, delay, abort, kill, print, stop or fail(ERRNO)": what family `f` takes, for messages.
std::string taken_actions(const faults::point_family& f) {
  using faults::action_kind;
  std::vector<std::string> names;
  for (action_kind k : {action_kind::off, action_kind::delay, action_kind::abort, action_kind::kill, action_kind::print,
                        action_kind::stop, action_kind::fail, action_kind::teardown, action_kind::pause}) {
    if (!f.takes(k)) continue;
    std::string n(faults::to_string(k));
    if (k == action_kind::fail && f.injector == faults::injector::nccl) n += "(ncclResult_t name or N)";
    else if (k == action_kind::fail && f.injector != faults::injector::cuda) n += "(ERRNO)";
    names.push_back(n);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

// The families an item's point can reach: its own, or for a wildcard every one it covers.
std::vector<const faults::point_family*> covered_families(const faults::item& item) {
  std::vector<const faults::point_family*> out;
  if (!item.is_wildcard()) {
    if (const auto* f = faults::family_of(item.point)) out.push_back(f);
    return out;
  }
  for (const auto& f : faults::family_table) {
    if (faults::wildcard_covers(item.prefix(), f)) out.push_back(&f);
  }
  return out;
}

// ", did you mean NAME?" when a valid name is near `name`.
std::string nearest_hint(std::string_view name) {
  const std::string near = faults::nearest_place(name);
  return near.empty() ? std::string() : " (did you mean " + near + "?)";
}

// Refuses an item whose point names no point of any family, or a place its family does not have.
void check_place(const faults::item& item, const std::vector<const faults::point_family*>& covered,
                 spec_reader reader) {
  const std::string_view name = item.prefix();
  if (covered.empty()) {
    const std::string_view root = name.substr(0, name.find('/') + 1);
    std::string usage;
    for (const auto& f : faults::family_table) {
      if (root.size() > 1 && root.back() == '/' && f.name.starts_with(root) && usage.find(f.usage) == std::string::npos)
        usage += (usage.empty() ? "" : ", ") + std::string(f.usage);
    }
    if (!usage.empty())
      throw usage_error{"--faults: " + item.point + ": no such point; expected " + usage + nearest_hint(item.point)};
    if (reader == spec_reader::scenarios) return;  // a scenario's own point (never reached is reported)
    std::string known;
    for (const auto& f : faults::family_table) {
      const std::string_view r = f.name.substr(0, f.name.find('/') + 1);
      if (known.find(std::string(r)) == std::string::npos) known += (known.empty() ? "" : ", ") + std::string(r);
    }
    throw usage_error{"--faults: " + item.point + ": no such family of points" + nearest_hint(item.point) +
                      "; the families are " + known};
  }
  if (covered.size() == 1 && faults::has_place_table(*covered.front()) &&
      !faults::known_place(name, item.is_wildcard()))
    throw usage_error{"--faults: " + item.point + ": no such point; expected " + std::string(covered.front()->usage) +
                      nearest_hint(item.point)};
}

}  // namespace

namespace {

// An @filter must be one the item's families take: @rank=N for nccl/, a name for the others.
void check_filter(const faults::item& item, const std::vector<const faults::point_family*>& covered) {
  if (item.filter.empty()) return;
  const bool rank = item.filter.starts_with(faults::rank_filter_prefix);
  const bool taken = std::any_of(covered.begin(), covered.end(), [&](const faults::point_family* f) {
    return rank ? f->filter == faults::filter_kind::rank
                : f->filter == faults::filter_kind::program || f->filter == faults::filter_kind::function;
  });
  if (taken) return;
  throw usage_error{"--faults: " + item.written() +
                    ": an @filter is for process/start and spawn/parent (a program), lock/ (a function) and nccl/ "
                    "(@rank=N)"};
}

}  // namespace

// Every item is checked against the families (faults/families.h), the description the agent
// reads too: its point must exist, and its actions and filter must be ones the point takes. What
// the agent cannot do is refused up front rather than silently ignored.
void check_agent_points(const faults::spec& spec, spec_reader reader) {
  using faults::action_kind;
  for (const auto& item : spec.items) {
    const std::vector<const faults::point_family*> covered = covered_families(item);
    check_place(item, covered, reader);
    const auto reaches = [&](faults::injector which) {
      return std::any_of(covered.begin(), covered.end(), [&](const faults::point_family* f) { return f->injector == which; });
    };
    const bool fn_point = reaches(faults::injector::fn) && std::string_view(item.point).starts_with("fn/");
    if (fn_point && item.is_wildcard())
      throw usage_error{"--faults: " + item.point + ": fn/ points name one function exactly (fn/lock_shrreg)"};
    if (fn_point) {
      const std::string_view name = std::string_view(item.point).substr(3);
      const std::size_t plus = name.find('+');
      std::string_view off = plus == std::string_view::npos ? std::string_view{} : name.substr(plus + 1);
      const bool hex = off.starts_with("0x") || off.starts_with("0X");
      if (hex) off.remove_prefix(2);
      const bool digits = std::all_of(off.begin(), off.end(), [&](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) || (hex && std::isxdigit(static_cast<unsigned char>(c)));
      });
      if (name.empty() || plus == 0 || (plus != std::string_view::npos && (off.empty() || !digits)))
        throw usage_error{"--faults: " + item.point +
                          ": an fn/ point is fn/SYMBOL or fn/SYMBOL+OFFSET, a byte offset in decimal or 0x hex"};
    }
    check_filter(item, covered);
    for (const auto& t : item.terms) {
      const action_kind k = t.action.kind;
      // (A scenario's point outside every family: the fault engine takes every action.)
      if (!covered.empty() &&
          std::none_of(covered.begin(), covered.end(), [&](const faults::point_family* f) { return f->takes(k); })) {
        if (k == action_kind::fail && covered.size() == 1 && covered.front()->injector == faults::injector::cuda)
          throw usage_error{"--faults: " + item.point +
                            ": a CUDA runtime call cannot be failed (CUPTI's callbacks cannot change its result); fail "
                            "the driver call it makes instead, e.g. cuda/cuMemFree_v2=fail(CUDA_ERROR_LAUNCH_FAILED) "
                            "for cudaFree"};
        throw usage_error{"--faults: " + item.written() + " takes " + taken_actions(*covered.front()) + ", not " +
                          std::string(faults::to_string(k))};
      }
      if (k == action_kind::teardown && t.action.device == faults::current_device && !reaches(faults::injector::cuda))
        throw usage_error{"--faults: " + item.point + ": teardown(device) is for cuda/ points; name a device (teardown(0))"};
    }
  }
}

namespace {

// The name in `names` nearest to `name` by edit distance (at most a third of it differs), or "".
std::string nearest_name(std::string_view name, const std::set<std::string>& names) {
  std::string best;
  std::size_t best_distance = name.size() / 3 + 1;
  for (const auto& candidate : names) {
    const std::size_t length_gap = candidate.size() > name.size() ? candidate.size() - name.size() : name.size() - candidate.size();
    if (length_gap >= best_distance) continue;
    if (const std::size_t d = faults::edit_distance(name, candidate); d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

bool has_function(const std::set<std::string>& names, std::string_view pattern) {
  if (!pattern.empty() && pattern.back() == '*') {
    pattern.remove_suffix(1);
    auto it = names.lower_bound(std::string(pattern));
    return it != names.end() && std::string_view(*it).starts_with(pattern);
  }
  return names.count(std::string(pattern)) != 0;
}

}  // namespace

void check_program_points(const faults::spec& spec, const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  if (argv.empty()) return;
  std::optional<std::set<std::string>> names;
  bool read = false;
  for (const auto& item : spec.items) {
    std::string_view function;
    std::string written;
    if (!item.is_wildcard() && std::string_view(item.point).starts_with("fn/")) {
      function = std::string_view(item.point).substr(3);
      function = function.substr(0, function.find('+'));
      written = item.point;
    } else if (!item.filter.empty() && faults::pattern_reaches(item.point, faults::injector::lock)) {
      function = item.filter;
      written = item.written();
    } else {
      continue;
    }
    if (!read) {
      names = program_function_names(argv.front(), env);
      // A launcher (sh -c './prog ...', env, timeout) runs other programs: each word of its
      // arguments that is a program adds its tables; one that is a script stops the check.
      for (std::size_t i = 1; i < argv.size() && names; ++i) {
        std::istringstream words(argv[i]);
        for (std::string w; names && words >> w;) {
          std::error_code ec;
          if (w.find('/') == std::string::npos || !fs::is_regular_file(w, ec) || ::access(w.c_str(), X_OK) != 0) continue;
          auto more = program_function_names(w, env);
          if (more) names->merge(*more);
          else names.reset();
        }
      }
      read = true;
    }
    if (!names) return;  // a script, or a library not found: nothing can be said missing
    if (has_function(*names, function)) continue;
    const std::string near = function.ends_with("*") ? std::string() : nearest_name(function, *names);
    throw usage_error{"--faults: " + written + ": no function " + std::string(function) + " in " + argv.front() +
                      " or the libraries it loads at start (their symbol tables)" +
                      (near.empty() ? std::string() : " (did you mean " + near + "?)")};
  }
}

}  // namespace faultline::harness
