#include "harness/cli_faults.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sys/stat.h>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "faults/families.h"
#include "faults/point_names.h"
#include "faults/preload/detail/inlined_sites.h"
#include "faults/symbol_names.h"
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

// Whether `names` has the function `pattern` names (a name, or a prefix and '*'): the function
// itself or one of its compiler clones (f.isra.0, f.part.0, f.cold: faults/symbol_names.h).
bool has_function(const std::set<std::string>& names, std::string_view pattern) {
  if (!pattern.empty() && pattern.back() == '*') {
    pattern.remove_suffix(1);
    auto it = names.lower_bound(std::string(pattern));
    return it != names.end() && std::string_view(*it).starts_with(pattern);
  }
  if (names.count(std::string(pattern)) != 0) return true;
  for (auto it = names.lower_bound(std::string(pattern) + "."); it != names.end() && it->starts_with(pattern); ++it) {
    if (faults::names_function(*it, pattern)) return true;
  }
  return false;
}

bool pattern_names(std::string_view pattern, std::string_view function) {
  if (!pattern.empty() && pattern.back() == '*') return function.starts_with(pattern.substr(0, pattern.size() - 1));
  return function == pattern;
}

// The lock calls a lock/ point (or wildcard) stands at, for "functions that call ...".
std::set<std::string> lock_primitives(std::string_view point) {
  struct call {
    const char* kind;
    const char* where;  // the points it passes: w(ait), a(cquired), r(elease)
    const char* name;
  };
  static constexpr call calls[] = {
      {"sem", "wa", "sem_wait"}, {"sem", "wa", "sem_timedwait"}, {"sem", "wa", "sem_clockwait"}, {"sem", "a", "sem_trywait"},
      {"sem", "r", "sem_post"}, {"mutex", "wa", "pthread_mutex_lock"}, {"mutex", "wa", "pthread_mutex_timedlock"},
      {"mutex", "wa", "pthread_mutex_clocklock"}, {"mutex", "a", "pthread_mutex_trylock"}, {"mutex", "r", "pthread_mutex_unlock"},
      {"file", "war", "flock"}, {"file", "war", "lockf"}, {"file", "war", "fcntl"}, {"file", "war", "fcntl64"}};
  std::set<std::string> out;
  for (const auto& c : calls) {
    for (const char* where : {"wait", "acquired", "release"}) {
      if (std::strchr(c.where, where[0]) == nullptr) continue;
      const std::string name = std::string("lock/") + c.kind + "/" + where;
      if (name == point || (point.ends_with("*") && std::string_view(name).starts_with(point.substr(0, point.size() - 1))))
        out.insert(c.name);
    }
  }
  return out;
}

std::string joined(const std::vector<std::string>& words, std::size_t most) {
  std::string out;
  for (std::size_t i = 0; i < words.size() && i < most; ++i) out += (i ? ", " : "") + words[i];
  if (words.size() > most) out += ", ...";
  return out;
}

// FAULTLINE_INLINED's value for `sites` (agent/detail/inlined_sites.h): those that fit its bounds.
std::string inlined_environment(const std::vector<inlined_site>& sites) {
  using bounds = agent::detail::inlined_site;
  std::string out;
  std::size_t count = 0;
  for (const auto& site : sites) {
    struct stat st {};
    if (site.function.size() > bounds::max_name || site.caller.empty() || site.caller.size() > bounds::max_name ||
        site.ranges.size() > bounds::max_ranges || ::stat(site.module.c_str(), &st) != 0 || ++count > 64)
      continue;
    std::ostringstream one;
    one << site.function << ':' << site.caller << ':' << st.st_dev << ':' << st.st_ino << ':' << std::hex << site.entry << ':';
    for (std::size_t i = 0; i < site.ranges.size(); ++i)
      one << (i ? "," : "") << site.ranges[i].first << '-' << site.ranges[i].second;
    out += (out.empty() ? "" : ";") + one.str();
  }
  return out;
}

}  // namespace

std::string check_program_points(const faults::spec& spec, const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                 std::vector<std::string>* notes) {
  if (argv.empty()) return {};
  struct wanted {
    std::string function;  // a name, or a prefix and '*'
    std::string written;   // the item as written
    std::string point;
    bool fn = false;
  };
  std::vector<wanted> functions;
  for (const auto& item : spec.items) {
    if (!item.is_wildcard() && std::string_view(item.point).starts_with("fn/")) {
      std::string_view f = std::string_view(item.point).substr(3);
      functions.push_back({std::string(f.substr(0, f.find('+'))), item.point, item.point, true});
    } else if (!item.filter.empty() && faults::pattern_reaches(item.point, faults::injector::lock)) {
      functions.push_back({item.filter, item.written(), item.point, false});
    }
  }
  if (functions.empty()) return {};
  // The program's tables: argv[0]'s, and those of each word of its arguments that is a program (a
  // launcher: sh -c './prog ...', env, timeout); one that is a script stops the check.
  std::optional<std::set<std::string>> names = program_function_names(argv.front(), env);
  std::vector<fs::path> modules;
  if (names) {
    if (auto m = program_modules(argv.front(), env)) modules = *m;
  }
  std::vector<fs::path> programs{argv.front()};
  for (std::size_t i = 1; i < argv.size() && names; ++i) {
    std::istringstream words(argv[i]);
    for (std::string w; names && words >> w;) {
      std::error_code ec;
      if (w.find('/') == std::string::npos || !fs::is_regular_file(w, ec) || ::access(w.c_str(), X_OK) != 0) continue;
      auto more = program_function_names(w, env);
      if (!more) {
        names.reset();
        break;
      }
      names->merge(*more);
      programs.emplace_back(w);
      if (auto m = program_modules(w, env)) modules.insert(modules.end(), m->begin(), m->end());
    }
  }
  if (!names) return {};  // a script, or a library not found: nothing can be said missing
  // Where the named functions were inlined (the DWARF's): the agent matches there too.
  const inlined_copies inlined = find_inlined(modules, [&](std::string_view name) {
    return std::any_of(functions.begin(), functions.end(), [&](const wanted& w) { return pattern_names(w.function, name); });
  });
  const bool program_has_dwarf = std::any_of(inlined.with_dwarf.begin(), inlined.with_dwarf.end(), [&](const fs::path& m) {
    return std::find(programs.begin(), programs.end(), m) != programs.end();
  });
  // The program's functions that call (or tail-call) a family's lock calls, but for those `skip`
  // names: what to name instead when the named function's own code is not where the lock is taken.
  const auto callers_of = [&](const wanted& w, bool skip_named) {
    std::vector<std::string> callers;
    const std::set<std::string> primitives = lock_primitives(w.point);
    for (const auto& program : programs) {
      for (auto& c : functions_calling(program, primitives)) {
        if (skip_named && (pattern_names(w.function, c) || faults::names_function(c, w.function))) continue;
        callers.push_back(std::move(c));
      }
    }
    return std::pair{callers, primitives};
  };
  for (const auto& w : functions) {
    if (has_function(*names, w.function)) {
      // Found, but with no DWARF the copies of it that the compiler inlined elsewhere are unseen:
      // -O2 inlines a small lock wrapper into some callers and keeps it out of line for others
      // (HAMi-core's unlock_shrreg: inlined into init_proc_slot_withlock, called from two others).
      if (notes != nullptr && !w.fn && !program_has_dwarf && !w.function.ends_with("*")) {
        auto [callers, primitives] = callers_of(w, true);
        if (!callers.empty())
          notes->push_back(w.written + ": without DWARF (.debug_info), copies of " + w.function +
                           " that the compiler inlined into other functions cannot be seen: the point fires where " +
                           w.function + " itself runs. If it is never reached, name one of the other functions that call " +
                           joined({primitives.begin(), primitives.end()}, 5) + ": " + joined(callers, 8) +
                           ", or build the program with -g");
      }
      continue;
    }
    if (std::any_of(inlined.sites.begin(), inlined.sites.end(),
                    [&](const inlined_site& s) { return pattern_names(w.function, s.function); }))
      continue;
    std::string why = "--faults: " + w.written + ": no function " + w.function + " in " + argv.front() +
                      " or the libraries it loads at start (their symbol tables";
    if (program_has_dwarf) {
      why += ", and no inlined copy of it in their DWARF)";
      const std::string near = w.function.ends_with("*") ? std::string() : nearest_name(w.function, *names);
      if (!near.empty()) why += " (did you mean " + near + "?)";
      throw usage_error{why};
    }
    why += ")";
    const std::string near = w.function.ends_with("*") ? std::string() : nearest_name(w.function, *names);
    if (!near.empty()) why += " (did you mean " + near + "?)";
    // No DWARF: an inlined function leaves no trace to find it by. Say so, and what can be named.
    why += ". Without DWARF (.debug_info) nothing shows where a function was inlined: a static or inline " + w.function +
           " that the compiler inlined into its callers (as -O2 does to small wrappers) has no symbol, so this point "
           "cannot fire as written. Name the function it was inlined into";
    if (!w.fn) {
      auto [callers, primitives] = callers_of(w, false);
      if (!callers.empty())
        why += " (the functions of the program that call " + joined({primitives.begin(), primitives.end()}, 5) + ": " +
               joined(callers, 8) + ")";
    }
    why += ", or build the program with -g so that its inlined copies are found";
    throw usage_error{why};
  }
  return inlined_environment(inlined.sites);
}

}  // namespace faultline::harness
