#include "faults/engine.h"

// libfiu declares its functions only when FIU_ENABLE is set (otherwise fiu.h turns them into
// constants, like our own points header does).
#define FIU_ENABLE 1
#include <fiu-control.h>
#include <fiu.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/host_ids.h"
#include "faults/detail/actions.h"
#include "core/points/random.h"
#include "core/points/point.h"

namespace faultline::faults {

namespace {

using core::errc;
using core::status;

constexpr std::string_view compiled_out_message = "faults compiled out (FAULTLINE_FAULTS=OFF)";

struct counter_cell {
  std::atomic<std::uint64_t> hits{0};
  std::atomic<std::uint64_t> fires{0};
};

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// Cells are never erased (reset zeroes them), so a hook may keep a cell pointer without a lock.
class counter_table {
 public:
  counter_cell* find_or_add(std::string_view name) noexcept {
    {
      std::shared_lock lock(mu_);
      if (auto it = cells_.find(name); it != cells_.end()) return it->second.get();
    }
    try {
      std::unique_lock lock(mu_);
      auto [it, inserted] = cells_.try_emplace(std::string(name));
      if (inserted) it->second = std::make_unique<counter_cell>();
      return it->second.get();
    } catch (...) {
      return nullptr;  // out of memory: the hit goes uncounted rather than failing the caller
    }
  }

  point_counter get(std::string_view name) {
    std::shared_lock lock(mu_);
    point_counter out{std::string(name), 0, 0};
    if (auto it = cells_.find(name); it != cells_.end()) {
      out.hits = it->second->hits.load(std::memory_order_relaxed);
      out.fires = it->second->fires.load(std::memory_order_relaxed);
    }
    return out;
  }

  std::vector<point_counter> all() {
    std::vector<point_counter> out;
    {
      std::shared_lock lock(mu_);
      out.reserve(cells_.size());
      for (const auto& [name, cell] : cells_) {
        point_counter c{name, cell->hits.load(std::memory_order_relaxed), cell->fires.load(std::memory_order_relaxed)};
        if (c.hits != 0 || c.fires != 0) out.push_back(std::move(c));  // zeroed by a reset: not hit since
      }
    }
    std::sort(out.begin(), out.end(), [](const point_counter& a, const point_counter& b) { return a.point < b.point; });
    return out;
  }

  void reset() noexcept {
    std::shared_lock lock(mu_);
    for (auto& [name, cell] : cells_) {
      cell->hits.store(0, std::memory_order_relaxed);
      cell->fires.store(0, std::memory_order_relaxed);
    }
  }

 private:
  std::shared_mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<counter_cell>, string_hash, std::equal_to<>> cells_;
};

// One term as the callback sees it: counts are decremented concurrently from many threads.
struct term_state {
  std::optional<std::uint32_t> probability_ppb;
  bool limited = false;
  std::atomic<std::uint64_t> remaining{0};
  detail::action_record record;
};

// One enabled item; its address is the failinfo libfiu hands back to the callback.
struct item_state {
  std::string pattern;
  std::atomic<bool> reached{false};  // some hit matched this item: recorded once per process
  std::unique_ptr<term_state[]> terms;
  std::size_t term_count = 0;
};

struct engine {
  std::mutex config_mu;
  // Guarded by config_mu. Items are freed only after fiu_disable has returned for them: libfiu
  // runs callbacks under its read lock and fiu_disable takes the write lock, so none is running.
  std::vector<std::unique_ptr<item_state>> items;
  spec active;
  bool fiu_ready = false;

  std::atomic<std::uint64_t> seed{default_seed};
  std::atomic<bool> remote{false};
  generator rng{default_seed};
  counter_table counters;
};

// Never destroyed: threads still hitting points during process exit must find it intact.
engine& the_engine() {
  static engine* e = new engine;
  return *e;
}

// What the callback chose on this thread, for the hook to run once fiu_fail has returned.
struct pending_action {
  bool set = false;
  detail::action_record record;
  // An item reached for the first time in this process, to record once fiu_fail has returned
  // (its pattern is copied: the item may be replaced by then).
  bool newly_reached = false;
  char reached_pattern[256] = {};
};
thread_local pending_action pending;

// libfiu's external callback: runs under libfiu's read lock, so it only decides and records.
int evaluate(const char* /*pattern*/, int* /*failnum*/, void** failinfo, unsigned int* /*flags*/) {
  auto* item = static_cast<item_state*>(*failinfo);
  engine& e = the_engine();
  if (!item->reached.load(std::memory_order_relaxed) && !item->reached.exchange(true) &&
      item->pattern.size() < sizeof(pending.reached_pattern)) {
    std::memcpy(pending.reached_pattern, item->pattern.c_str(), item->pattern.size() + 1);
    pending.newly_reached = true;
  }
  for (std::size_t i = 0; i < item->term_count; ++i) {
    term_state& t = item->terms[i];
    if (t.limited && t.remaining.load(std::memory_order_relaxed) == 0) continue;
    if (t.probability_ppb && !(e.rng.next_unit() * 1e9 < static_cast<double>(*t.probability_ppb))) continue;
    if (t.limited) {
      std::uint64_t left = t.remaining.load(std::memory_order_relaxed);
      bool taken = false;
      while (left > 0 && !(taken = t.remaining.compare_exchange_weak(left, left - 1, std::memory_order_relaxed))) {
      }
      if (!taken) continue;  // another thread used the last one
    }
    if (t.record.kind == action_kind::off) return 0;
    pending.record = t.record;
    pending.set = true;
    return 1;
  }
  return 0;
}

// Appends `pattern` to $FAULTLINE_RUN_DIR/points.PID (the harness's protocol, see
// faults/preload/protocol.h), so that a run can say which enabled items were ever reached.
void record_reached(const char* pattern) noexcept {
  const char* dir = std::getenv("FAULTLINE_RUN_DIR");
  if (dir == nullptr || *dir == '\0') return;
  char path[4096];
  const int n = std::snprintf(path, sizeof path, "%s/%s%ld", dir, reached_points_file_prefix,
                              static_cast<long>(core::host_pid()));
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof path) return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char line[sizeof(pending_action::reached_pattern) + 1];
  const std::size_t len = std::strlen(pattern);
  std::memcpy(line, pattern, len);
  line[len] = '\n';
  (void)!::write(fd, line, len + 1);  // one write: lines from several threads stay whole
  ::close(fd);
}

points::outcome hook(const char* name) noexcept {
  engine& e = the_engine();
  counter_cell* cell = e.counters.find_or_add(name);
  if (cell != nullptr) cell->hits.fetch_add(1, std::memory_order_relaxed);
  pending.set = false;
  pending.newly_reached = false;
  const int failnum = fiu_fail(name);
  if (pending.newly_reached) record_reached(pending.reached_pattern);
  if (failnum == 0) return {};
  if (cell != nullptr) cell->fires.fetch_add(1, std::memory_order_relaxed);
  if (!pending.set) return {true, failnum};  // enabled from outside (fiu-ctrl): a plain failure
  // Copied out first: the action may hit points itself (teardown calls into the device).
  const detail::action_record record = pending.record;
  pending.set = false;
  return detail::run_action(name, record);
}

void ensure_fiu(engine& e) {
  if (!e.fiu_ready) {
    fiu_init(0);
    e.fiu_ready = true;
  }
}

// Arms the points exactly while something may fire. Caller holds config_mu.
void update_arming(engine& e) {
  if (!e.items.empty() || e.remote.load()) {
    points::install_hook(&hook);
    points::set_armed(true);
  } else {
    points::set_armed(false);
    points::install_hook(nullptr);
  }
}

void disable_items(engine& e) {
  for (const auto& item : e.items) fiu_disable(item->pattern.c_str());
  e.items.clear();
  e.active = spec{};
}

std::unique_ptr<item_state> make_state(const item& it) {
  auto state = std::make_unique<item_state>();
  state->pattern = it.point;
  state->term_count = it.terms.size();
  state->terms = std::make_unique<term_state[]>(it.terms.size());
  for (std::size_t i = 0; i < it.terms.size(); ++i) {
    const term& t = it.terms[i];
    term_state& s = state->terms[i];
    s.probability_ppb = t.probability_ppb;
    s.limited = t.count.has_value();
    s.remaining.store(t.count.value_or(0), std::memory_order_relaxed);
    s.record = detail::make_record(t.action);
  }
  return state;
}

status apply(spec next, std::uint64_t seed) {
  engine& e = the_engine();
  std::vector<std::unique_ptr<item_state>> states;
  states.reserve(next.items.size());
  // An item with an @filter names one of the preloaded agent's points, never the engine's.
  std::erase_if(next.items, [](const item& it) { return !it.filter.empty(); });
  for (const item& it : next.items) states.push_back(make_state(it));

  // libfiu looks exact names up first and then tries wildcards in the order they were enabled,
  // so enabling longer prefixes first makes the most specific wildcard win.
  std::vector<std::size_t> order(states.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const item& x = next.items[a];
    const item& y = next.items[b];
    if (x.is_wildcard() != y.is_wildcard()) return !x.is_wildcard();
    return x.prefix().size() > y.prefix().size();
  });

  std::lock_guard lock(e.config_mu);
  ensure_fiu(e);
  disable_items(e);
  e.rng.reseed(seed);
  e.seed.store(seed);
  if (!states.empty()) {
    points::install_hook(&hook);
    points::set_armed(true);
  }
  for (std::size_t k = 0; k < order.size(); ++k) {
    item_state* s = states[order[k]].get();
    if (fiu_enable_external(s->pattern.c_str(), 1, s, 0, &evaluate) != 0) {
      for (std::size_t j = 0; j < k; ++j) fiu_disable(states[order[j]]->pattern.c_str());
      update_arming(e);
      return status(errc::internal, "faults: libfiu refused to enable '" + s->pattern + "'; nothing is enabled");
    }
  }
  e.items = std::move(states);
  e.active = std::move(next);
  update_arming(e);
  return status::ok();
}

core::result<std::uint64_t> parse_seed(std::string_view text) {
  std::uint64_t v = 0;
  bool hex = text.starts_with("0x") || text.starts_with("0X");
  std::string_view digits = hex ? text.substr(2) : text;
  bool ok = !digits.empty() && digits.size() <= (hex ? 16u : 20u);
  for (char c : digits) {
    if (!ok) break;
    unsigned d = 0;
    if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
    else if (hex && c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
    else if (hex && c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
    else ok = false;
    if (!ok) break;
    std::uint64_t base = hex ? 16 : 10;
    if (v > (UINT64_MAX - d) / base) ok = false;
    else v = v * base + d;
  }
  if (!ok) {
    return status(errc::invalid_argument,
                  "FAULTLINE_SEED: expected an unsigned 64-bit integer (decimal or 0x-hex), found '" +
                      std::string(text) + "'");
  }
  return v;
}

}  // namespace

std::string default_fifo_basename() {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/fiu-ctrl";
}

status configure(std::string_view spec_text, std::uint64_t seed) {
  auto parsed = parse(spec_text);
  if (!parsed) return parsed.error();
  if (!compiled_in() && !parsed->empty()) return status(errc::unavailable, std::string(compiled_out_message));
  return apply(std::move(*parsed), seed);
}

status configure_from_environment() {
  const char* faults_env = std::getenv("FAULTLINE_FAULTS");
  const char* seed_env = std::getenv("FAULTLINE_SEED");
  const char* ctrl_env = std::getenv("FAULTLINE_FIU_CTRL");

  std::uint64_t seed = default_seed;
  if (seed_env != nullptr && *seed_env != '\0') {
    auto s = parse_seed(seed_env);
    if (!s) return s.error();
    seed = *s;
  }
  bool remote = false;
  if (ctrl_env != nullptr) {
    std::string_view v(ctrl_env);
    if (v == "1") remote = true;
    else if (!v.empty() && v != "0") {
      return status(errc::invalid_argument, "FAULTLINE_FIU_CTRL: expected 0 or 1, found '" + std::string(v) + "'");
    }
  }
  auto parsed = parse(faults_env != nullptr ? faults_env : "");
  if (!parsed) return status(errc::invalid_argument, "FAULTLINE_FAULTS: " + parsed.error().message());
  if (!compiled_in()) {
    if (!parsed->empty()) return status(errc::unavailable, "FAULTLINE_FAULTS: " + std::string(compiled_out_message));
    if (remote) return status(errc::unavailable, "FAULTLINE_FIU_CTRL: " + std::string(compiled_out_message));
  }
  if (remote) {
    if (auto s = enable_remote_control(); !s) return status(s.code(), "FAULTLINE_FIU_CTRL: " + s.message());
  }
  return apply(std::move(*parsed), seed);
}

void disable_all() noexcept {
  engine& e = the_engine();
  std::lock_guard lock(e.config_mu);
  if (e.fiu_ready) disable_items(e);
  update_arming(e);
}

status enable_remote_control(const std::string& basename) {
  if (!compiled_in()) return status(errc::unavailable, std::string(compiled_out_message));
  engine& e = the_engine();
  std::lock_guard lock(e.config_mu);
  if (e.remote.load()) return status::ok();
  ensure_fiu(e);
  errno = 0;
  if (fiu_rc_fifo(basename.c_str()) != 0) {
    int err = errno != 0 ? errno : EIO;
    return status::from_errno(err, "fiu_rc_fifo " + basename + ": cannot create the remote-control pipes");
  }
  e.remote.store(true);
  update_arming(e);
  return status::ok();
}

bool remote_control_enabled() noexcept { return the_engine().remote.load(); }

std::uint64_t current_seed() noexcept { return the_engine().seed.load(); }

std::string current_spec() {
  engine& e = the_engine();
  std::lock_guard lock(e.config_mu);
  return format(e.active);
}

std::vector<point_counter> counters() { return the_engine().counters.all(); }

point_counter counter(std::string_view point) { return the_engine().counters.get(point); }

void reset_counters() noexcept { the_engine().counters.reset(); }

}  // namespace faultline::faults
