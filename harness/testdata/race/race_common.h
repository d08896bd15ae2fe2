// Shared pieces of the exit-race programs (fl_race_*): a detached worker that touches a buffer
// every PERIOD microseconds, which some exit-time code (a static destructor, an atexit handler,
// a shared library's destructor) unmaps. Whether the process dies by SIGSEGV depends on whether
// the worker's next touch falls between the unmapping and the end of the process: a window of
// a few microseconds, so the rate is set by the period and by anything that changes exit's
// timing — which is what these programs exist to measure (bare vs under faultline).
//
// Common options:
//   --period-us N  the worker touches the buffer every N us of busy work (default 10)
//   --work-ms N    main lets the worker run N ms before it returns (default 5)
//   --drain        the fix: main stops the worker and joins it before returning; never crashes
//
// Output at exit, as real programs write it (a last line, a destructor's log line, a final
// report). Where it goes (a pipe, a regular file, /dev/null) changes how long exit takes, and with
// it how often the race crashes: the fidelity benchmark runs these against each destination.
//   --exit-printf  main printf()s one line just before it returns and leaves it in stdio's
//                  buffer: exit() writes it after every destructor (stdio's last flush), inside
//                  the window where the buffer is already released. Lost when the process crashes
//                  first; written at once when stdout is a terminal (line-buffered).
//   --exit-stderr  the exit-time code writes one line to stderr (fprintf, unbuffered) right after
//                  it releases the buffer, inside the window, as a destructor that logs what it
//                  tore down does. Lost when the worker crashes the process first.
//   --exit-flood   the exit-time code writes 1 MiB to stdout (fwrite, then fflush) before it
//                  releases the buffer, so every byte precedes any crash: exit waits until a
//                  reader drains the pipe, and never ends when no one does.
// Built without debug information and without exported symbols on purpose: a crash report must
// still name race_worker_touch (from the symbol table).
#pragma once

#include <sys/mman.h>
#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace fl_race {

struct options {
  long period_us = 10;
  long work_ms = 5;
  bool drain = false;
  bool exit_printf = false;
  bool exit_stderr = false;
  bool exit_flood = false;
};

inline int usage(const char* name) {
  std::fprintf(stderr, "usage: %s [--period-us N] [--work-ms N] [--drain] [--exit-printf] [--exit-stderr] [--exit-flood]\n",
               name);
  return 64;
}

inline bool parse_count(const char* text, long& out) {
  char* end = nullptr;
  out = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && out >= 0;
}

/// Parses argv into `o`; false on a bad argument.
inline bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--drain") == 0) {
      o.drain = true;
    } else if (std::strcmp(argv[i], "--exit-printf") == 0) {
      o.exit_printf = true;
    } else if (std::strcmp(argv[i], "--exit-stderr") == 0) {
      o.exit_stderr = true;
    } else if (std::strcmp(argv[i], "--exit-flood") == 0) {
      o.exit_flood = true;
    } else if (std::strcmp(argv[i], "--period-us") == 0 && i + 1 < argc) {
      if (!parse_count(argv[++i], o.period_us)) return false;
    } else if (std::strcmp(argv[i], "--work-ms") == 0 && i + 1 < argc) {
      if (!parse_count(argv[++i], o.work_ms)) return false;
    } else {
      return false;
    }
  }
  return true;
}

inline constexpr std::size_t buffer_bytes = 1 << 16;

inline volatile char* map_buffer() {
  void* p = ::mmap(nullptr, buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  return static_cast<volatile char*>(p);
}

inline void unmap_buffer(volatile char* p) { ::munmap(const_cast<char*>(p), buffer_bytes); }

inline constexpr std::size_t exit_flood_bytes = std::size_t{1} << 20;

/// The exit-time code (`who`: "static destructor", ...): releases the buffer, with --exit-flood's
/// MiB before and --exit-stderr's line after.
inline void release_at_exit(std::atomic<volatile char*>& buffer, const options& o, const char* who) {
  if (o.exit_flood) {
    static const char line[] = "fl_race: exit flood, 64-byte lines to stdout, 1 MiB in all.....\n";
    static_assert(sizeof(line) - 1 == 64);
    for (std::size_t n = 0; n < exit_flood_bytes; n += sizeof(line) - 1) std::fwrite(line, 1, sizeof(line) - 1, stdout);
    std::fflush(stdout);
  }
  unmap_buffer(buffer.load());
  if (o.exit_stderr) std::fprintf(stderr, "fl_race: %s released the worker's buffer\n", who);
}

inline long now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/// The worker's state; `buffer` is read on every touch, so a buffer unmapped under it faults.
struct worker_state {
  std::atomic<volatile char*>* buffer;
  long period_us;
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
};

}  // namespace fl_race

// Defined in each program (not inline, not exported): the frame a crash report must name.
void race_worker_touch(volatile char* p, long i);
void race_worker_loop(fl_race::worker_state* s);

namespace fl_race {

/// Starts the worker; returns once it has touched the buffer at least once.
inline void start_worker(worker_state& s) {
  std::thread(race_worker_loop, &s).detach();
  while (!s.started.load()) std::this_thread::yield();
}

/// main's end: let the worker run, then either return at once (the race) or drain it (the fix).
inline int finish(worker_state& s, const options& o) {
  std::this_thread::sleep_for(std::chrono::milliseconds(o.work_ms));
  if (o.drain) {
    s.stop.store(true);
    while (s.started.load()) std::this_thread::yield();  // the worker clears it when it leaves
  }
  std::printf("work done\n");
  std::fflush(stdout);
  if (o.exit_printf) std::printf("fl_race: main returns; exit() flushes this line\n");  // left buffered
  return 0;
}

}  // namespace fl_race

// The worker's body, shared by the programs through this macro so that each program defines
// its own copy (in its own module) of the functions a signature must name.
#define FL_RACE_DEFINE_WORKER()                                                   \
  [[gnu::noinline]] void race_worker_touch(volatile char* p, long i) {            \
    p[i & (fl_race::buffer_bytes - 1)] = static_cast<char>(p[0] + 1);             \
    asm volatile("" ::: "memory");                                                \
  }                                                                               \
  [[gnu::noinline]] void race_worker_loop(fl_race::worker_state* s) {             \
    for (long i = 0; !s->stop.load(std::memory_order_relaxed); ++i) {             \
      race_worker_touch(s->buffer->load(std::memory_order_relaxed), i * 64);      \
      s->started.store(true, std::memory_order_relaxed);                         \
      const long until = fl_race::now_ns() + s->period_us * 1000;                 \
      while (fl_race::now_ns() < until) {                                         \
      }                                                                           \
    }                                                                             \
    s->started.store(false);                                                      \
  }
