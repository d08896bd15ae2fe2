// What the sim backend's tests share (sim_backend_test.cc: lifecycle, faults, utilisation, fault
// points, options; sim_backend_memory_test.cc: memory, contexts, streams and events): bounded
// waits, gates that hold a stream, the death-test children's requirement check, and the recorder
// of the sim's fault points.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <source_location>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/device/device.h"
#include "core/points/point.h"

#include "core/device/sim/sim_backend.h"

namespace faultline::core::device::sim_test_support {

using namespace std::chrono_literals;
namespace points = faultline::points;

inline constexpr auto bound = 30s;  // no correct run comes near it; a broken one fails instead of hanging
// Tests driven by fault points skip when FAULTLINE_FAULTS=OFF compiles the points to constants.
inline constexpr bool points_compiled_in = FAULTLINE_FAULTS_ENABLED;

inline backend& the_sim() { return sim(); }

// In a death-test child, gtest assertions do not reach the parent: fail with a message and a
// distinctive exit status instead.
inline void require(bool ok, const char* what, std::source_location where = std::source_location::current()) {
  if (ok) return;
  std::fprintf(stderr, "child requirement failed (line %u): %s\n", where.line(), what);
  std::_Exit(3);
}

// The sanitizers catch SIGSEGV to print a report and exit(1), but these children must die of the
// signal itself. The options are read at process start, so setting them here affects only the
// re-exec'd children (which inherit the environment), not this process's own SEGV reports.
inline void let_children_die_of_segv() {
  for (const char* var : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"}) {
    const char* old = std::getenv(var);
    std::string value = old != nullptr ? old : "";
    if (value.find("handle_segv=0") != std::string::npos) continue;
    if (!value.empty()) value += ':';
    value += "handle_segv=0";
    setenv(var, value.c_str(), 1);
  }
}

template <class Pred>
inline bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A host function that holds its stream until the test opens the gate.
struct gate {
  std::atomic<bool> entered{false};
  std::atomic<bool> opened{false};

  static void hold(void* self) {
    auto* g = static_cast<gate*>(self);
    g->entered.store(true);
    eventually([g] { return g->opened.load(); });
  }
  void open() { opened.store(true); }
  bool wait_entered() { return eventually([this] { return entered.load(); }); }
};

// Opens a gate from another thread after a pause, for calls that block until it opens.
inline std::thread open_later(gate& g) {
  return std::thread([&g] {
    std::this_thread::sleep_for(50ms);
    g.open();
  });
}

// --- fault point hooks -------------------------------------------------------------------------

struct recorder {
  static inline std::atomic<int> window_hits{0};
  static inline std::atomic<int> allocate_hits{0};
  static inline std::atomic<int> free_hits{0};
  static inline std::atomic<int> op_hits{0};
  static inline std::atomic<int> fail_window{0};
  static inline std::atomic<int> fail_allocate{0};
  static inline std::atomic<int> fail_free{0};
  static inline std::atomic<int> fail_op{0};

  static points::outcome hook(const char* name) noexcept {
    const std::string_view n(name);
    auto fire = [](std::atomic<int>& hits, std::atomic<int>& fail) {
      hits.fetch_add(1);
      const int code = fail.load();
      return points::outcome{code != 0, code};
    };
    if (n == "sim/call/after-unloading-check") return fire(window_hits, fail_window);
    if (n == "sim/allocate") return fire(allocate_hits, fail_allocate);
    if (n == "sim/free") return fire(free_hits, fail_free);
    if (n == "sim/stream/op") return fire(op_hits, fail_op);
    return {};
  }
};

class recording_points {
 public:
  recording_points() {
    for (auto* a : {&recorder::window_hits, &recorder::allocate_hits, &recorder::free_hits, &recorder::op_hits,
                    &recorder::fail_window, &recorder::fail_allocate, &recorder::fail_free, &recorder::fail_op}) {
      a->store(0);
    }
    points::install_hook(&recorder::hook);
    points::set_armed(true);
  }
  ~recording_points() {
    points::set_armed(false);
    points::install_hook(nullptr);
  }
  recording_points(const recording_points&) = delete;
  recording_points& operator=(const recording_points&) = delete;
};

// Holds the first call that reaches the race window until the test lets it go.
inline std::atomic<bool> g_hold_next_call{false};
inline std::atomic<bool> g_call_in_window{false};
inline std::atomic<bool> g_window_released{false};

inline points::outcome hold_in_window(const char* name) noexcept {
  if (std::strcmp(name, "sim/call/after-unloading-check") == 0 && g_hold_next_call.exchange(false)) {
    g_call_in_window.store(true);
    eventually([] { return g_window_released.load(); });
  }
  return {};
}

}  // namespace faultline::core::device::sim_test_support
