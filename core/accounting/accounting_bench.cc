// Costs of the shared accounting region (DESIGN.md §5.3), each on its own region file in /dev/shm:
//
//   charge_release        one uncontended charge + release pair: two seqlock write sections and
//                         two atomic adds on the aggregate, no lock
//   slots_sum/64          one consistent read of one device over 64 live slots (each slot read
//                         under its seqlock)
//   lock_recovery         from SIGKILL of a process that holds the lock to the next locker holding
//                         it, repair included (robust mutex, EOWNERDEAD); manual time
//   contended_charge/O/W  a 256 MiB charge + release by this process while O other processes
//                         charge and release 256 MiB in a loop and (W=1) a watcher process runs a
//                         5 ms device query back to back (the anchor's pathology: ~22x slower charges
//                         while its watcher held the lock); counters p50_ns, p99_ns, p99_over_p50
//   contended_atomic/O    the hardware's floor for the same loop: one fetch_add + fetch_sub pair on
//                         one shared cache line by this process and O others, no region at all.
//                         A charge's OOM decision is such an add (DESIGN.md §5.3), so its p99/p50
//                         cannot be lower than this one's on the same machine
//
//   accounting_bench --benchmark_filter=charge
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <new>
#include <thread>
#include <vector>
#include <cstdio>
#include <string>

#include "core/accounting/detail/layout.h"
#include "core/process_identity.h"
#include "core/accounting/region.h"
#include "core/host_ids.h"

namespace {

namespace acct = faultline::accounting;

std::string bench_path(const char* name) {
  return "/dev/shm/faultline-acct-bench-" + std::to_string(getpid()) + "-" + name;
}

std::unique_ptr<acct::region> open_fresh(const std::string& path, std::uint32_t max_slots) {
  ::unlink(path.c_str());
  acct::options o;
  o.devices = 1;
  o.max_slots = max_slots;
  o.exit_handlers = false;
  auto r = acct::region::create_or_attach(path, o);
  if (!r) {
    std::fprintf(stderr, "accounting_bench: %s\n", r.error().to_string().c_str());
    return nullptr;
  }
  return std::move(*r);
}

void charge_release(benchmark::State& state) {
  const std::string path = bench_path("charge");
  auto r = open_fresh(path, 64);
  if (!r || !r->register_process()) {
    state.SkipWithError("cannot create the region");
    return;
  }
  for (auto _ : state) {
    auto a = r->charge(0, acct::kind::data, 4096);
    auto b = r->release(0, acct::kind::data, 4096);
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(b);
  }
  r.reset();
  ::unlink(path.c_str());
}
BENCHMARK(charge_release);

void slots_sum(benchmark::State& state) {
  const auto slots = static_cast<std::uint32_t>(state.range(0));
  const std::string path = bench_path("sum");
  auto r = open_fresh(path, slots);
  if (!r || !r->register_process()) {
    state.SkipWithError("cannot create the region");
    return;
  }
  (void)r->charge(0, acct::kind::data, 4096);
  // Fill the other slots as live ones (this process's identity), each with its own usage.
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  const std::size_t bytes = acct::detail::region_bytes(slots);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  auto* h = static_cast<acct::detail::header*>(p);
  for (std::uint32_t i = 1; i < slots; ++i) {
    auto* s = acct::detail::slot_at(h, i);
    s->start_time.store(faultline::core::self_start_time());
    s->counters[0][acct::detail::c_total].store(i);
    s->counters[0][acct::detail::c_data].store(i);
    h->aggregate[0].fetch_add(i);
    s->pid.store(faultline::core::host_pid());
  }
  for (auto _ : state) {
    auto sum = r->slots_sum(0);
    benchmark::DoNotOptimize(sum);
  }
  ::munmap(p, bytes);
  r.reset();
  ::unlink(path.c_str());
}
BENCHMARK(slots_sum)->Arg(64);

void lock_recovery(benchmark::State& state) {
  const std::string path = bench_path("recovery");
  auto r = open_fresh(path, 64);
  if (!r) {
    state.SkipWithError("cannot create the region");
    return;
  }
  for (auto _ : state) {
    int ready[2];
    if (::pipe(ready) != 0) {
      state.SkipWithError("pipe");
      break;
    }
    // No device runtime and no other thread here, so a plain fork is safe.
    const pid_t child = ::fork();
    if (child == 0) {
      auto g = r->lock();
      char c = g ? 'y' : 'n';
      (void)!::write(ready[1], &c, 1);
      ::pause();
      ::_exit(0);
    }
    char c = 0;
    (void)!::read(ready[0], &c, 1);
    ::close(ready[0]);
    ::close(ready[1]);
    const auto t0 = std::chrono::steady_clock::now();
    ::kill(child, SIGKILL);
    auto g = r->lock();
    const auto t1 = std::chrono::steady_clock::now();
    if (!g || !g->repaired()) state.SkipWithError("the lock was not recovered");
    g = acct::region::lock_guard{};
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    int ws = 0;
    ::waitpid(child, &ws, 0);
  }
  r.reset();
  ::unlink(path.c_str());
}
BENCHMARK(lock_recovery)->UseManualTime()->Iterations(50)->Unit(benchmark::kMicrosecond);

}  // namespace

// Counters p50_ns, p99_ns and p99_over_p50 of the timed samples `ns`.
void report_percentiles(benchmark::State& state, std::vector<double>& ns) {
  if (ns.empty()) return;
  std::sort(ns.begin(), ns.end());
  const double p50 = ns[ns.size() / 2];
  const double p99 = ns[std::min(ns.size() - 1, ns.size() * 99 / 100)];
  state.counters["p50_ns"] = p50;
  state.counters["p99_ns"] = p99;
  state.counters["p99_over_p50"] = p50 > 0 ? p99 / p50 : 0;
}

void contended_charge(benchmark::State& state) {
  const int others = static_cast<int>(state.range(0));  // charging processes besides this one
  const bool watcher = state.range(1) != 0;
  constexpr std::uint64_t size = 256ull << 20;
  const std::string path = bench_path("contended");
  auto r = open_fresh(path, 64);
  if (!r || !r->register_process()) {
    state.SkipWithError("cannot create the region");
    return;
  }
  // The stop flag, shared with the processes forked below (no device runtime: fork is safe).
  void* shared = ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    state.SkipWithError("mmap");
    return;
  }
  auto* stop = new (shared) std::atomic<int>(0);
  std::vector<pid_t> kids;
  for (int i = 0; i < others + (watcher ? 1 : 0); ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      acct::options o;
      o.exit_handlers = false;
      auto mine = acct::region::attach(path, o);
      if (!mine || !(*mine)->register_process()) ::_exit(1);
      if (i == others) {  // the watcher: a slow query outside the lock, a short publication
        while (stop->load(std::memory_order_relaxed) == 0)
          (void)(*mine)->watch_once(0, [] {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            return faultline::core::result<std::uint32_t>(42u);
          });
      } else {
        while (stop->load(std::memory_order_relaxed) == 0) {
          if ((*mine)->charge(0, acct::kind::data, size)) (void)(*mine)->release(0, acct::kind::data, size);
        }
      }
      ::_exit(0);
    }
    if (pid > 0) kids.push_back(pid);
  }
  std::vector<double> ns;
  ns.reserve(1 << 16);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto st = r->charge(0, acct::kind::data, size);
    const auto t1 = std::chrono::steady_clock::now();
    if (st) (void)r->release(0, acct::kind::data, size);
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  stop->store(1);
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  ::munmap(shared, sizeof(std::atomic<int>));
  r.reset();
  ::unlink(path.c_str());
  report_percentiles(state, ns);
}
// {others, watcher}: 7 others with the watcher is the case; the rest separate the causes.
BENCHMARK(contended_charge)
    ->Args({0, 0})->Args({0, 1})->Args({7, 0})->Args({7, 1})
    ->Iterations(200000)->Unit(benchmark::kNanosecond);

void contended_atomic(benchmark::State& state) {
  const int others = static_cast<int>(state.range(0));
  constexpr std::uint64_t size = 256ull << 20;
  struct shared_page {
    alignas(64) std::atomic<int> stop{0};
    alignas(64) std::atomic<std::uint64_t> counter{0};
  };
  void* mem = ::mmap(nullptr, sizeof(shared_page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    state.SkipWithError("mmap");
    return;
  }
  auto* page = new (mem) shared_page;
  std::vector<pid_t> kids;
  for (int i = 0; i < others; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      while (page->stop.load(std::memory_order_relaxed) == 0) {
        page->counter.fetch_add(size, std::memory_order_acq_rel);
        page->counter.fetch_sub(size, std::memory_order_acq_rel);
      }
      ::_exit(0);
    }
    if (pid > 0) kids.push_back(pid);
  }
  std::vector<double> ns;
  ns.reserve(1 << 16);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t before = page->counter.fetch_add(size, std::memory_order_acq_rel);
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(before);
    page->counter.fetch_sub(size, std::memory_order_acq_rel);
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  page->stop.store(1);
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  ::munmap(mem, sizeof(shared_page));
  report_percentiles(state, ns);
}
BENCHMARK(contended_atomic)->Arg(0)->Arg(7)->Iterations(200000)->Unit(benchmark::kNanosecond);

BENCHMARK_MAIN();
