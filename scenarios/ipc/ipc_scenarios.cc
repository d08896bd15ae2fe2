// The ipc/ family: child processes importing allocations of a pool their parent exported
// (core/device/ipc.h), and the parent's protocol around them when a child is late, dies, or is
// handed bytes that are not written yet.
//
// The bug class is cuda-python #2124: a binding's IPC test suite wedged CI runners for four to six
// hours. The parent shared pool allocations with child processes, started a child and waited for
// it with a 30 s timeout; under a sanitizer the child started slowly, the parent ignored the
// timed-out wait, and closing the pool then blocked forever, because the child still held an
// imported handle (and the child waited on the parent). The fix is a layered defence, which the
// parent protocol below implements and every scenario here holds to: check every wait; on any
// failure kill the surviving children before anything else; track every child and kill leftovers
// at teardown (faults::launcher does, and its workers die with their parent); close the pool only
// when no live child can hold an import, with a bound even then; and an outer per-run timeout (the
// harness's) as the last line. A later report of the same class, numba-cuda #930, is a handle
// exported before the stream that filled the buffer had finished, so the child read stale bytes:
// every payload here carries a checksum, which makes that a detectable corruption.
//
// Method: the parent (this process) creates an IPC pool on the run's device (FAULTLINE_DEVICE: sim
// or cuda), fills a payload, exports it, and starts children as re-execs of the scenario binary
// (`faultline-scenarios worker ipc/...`, via faults::launcher: own seeds, the run's fault spec
// plus their own items, never a fork). A child gets its handle as the first line on its stdin and
// is released by EOF on it. It initialises its device runtime, imports, checks the payload's
// checksum, writes a block of its own and a report into the shared buffer (bytes both ways), and
// holds its import until released. The parent reads the reports through the device. Faults are
// process-level: a child's start delayed (the spawn-delay injector, a `delay` at the fault point
// ipc/child/start in that child's own spec), a child SIGKILLed while it holds its import (`kill`
// at ipc/child/holding), a stream kept busy (core::device::ipc::launch_host_gate).
// Two children per parent are enough for one to fail and one to hold an import; each process
// alive at a hang costs the harness a debugger attach when it captures the stacks.
//
// Bug points: bug/ipc/unchecked-join and bug/ipc/close-before-kill are the parent protocol's
// pre-fix paths (below); bug/ipc/dropped-event-wait is core::device::ipc's pre-fix publication. A
// pre-fix close is the binding's: it has no bound, so a bug variant that closes while a child holds
// an import hangs until the outer timeout, and the hung stacks show the parent inside
// ipc::pool::close. Every spec is inherited by the children: the whole tree runs the old code.
//
// Timing (timing_for below): the registered outer timeout (3.5 s) is for the sim; the catalog
// declares 30 s on cuda; the scenarios aim to fail cleanly within 90% of it. Each wait on a child
// counts from its device up, so a loaded machine's slow runtime starts are not taken for a late
// child; each run declares three slots (three processes with a device context at once), so
// `--jobs J` runs J contexts at most.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/device/device.h"
#include "core/device/ipc.h"
#include "core/host_ids.h"
#include "faults/engine.h"
#include "faults/launcher.h"
#include "core/points/point.h"
#include "scenarios/scenario.h"

namespace faultline::scenarios {

namespace {

using namespace std::chrono_literals;
namespace dev = faultline::core::device;
namespace ipc = faultline::core::device::ipc;
using clock_type = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

// --- the shared buffer -------------------------------------------------------------------------

constexpr std::size_t payload_bytes = 64 * 1024;
constexpr std::size_t payload_a = 0;                       // the exporter's payload
constexpr std::size_t payload_b = 64 * 1024;               // reexport-chain: B's payload for C
constexpr std::size_t blocks_at = 128 * 1024;              // one block per child, written by it
constexpr std::size_t block_bytes = 4096;
constexpr int max_children = 8;
constexpr std::size_t reports_at = blocks_at + max_children * block_bytes;
constexpr std::size_t report_bytes = 64;
constexpr std::size_t buffer_bytes = reports_at + max_children * report_bytes;

constexpr std::uint64_t report_magic = 0x5452504f52435049;  // "IPCRPORT"
enum verdict : std::uint32_t { verdict_ok = 1, verdict_stale = 2, verdict_downstream = 3 };

// What a child writes into its report slot once it has checked the payload and written its block.
struct report {
  std::uint64_t magic;      // report_magic once complete (written last)
  std::uint32_t index;
  std::int32_t pid;         // the child, as /proc names it
  std::uint64_t seen_sum;   // checksum of the payload it read
  std::uint64_t want_sum;   // the checksum it was told to expect
  std::uint32_t verdict;
  std::uint32_t detail;     // ipc/relay: its own child's exit status
  std::uint64_t block_sum;  // checksum of the block it wrote
  std::uint64_t reserved;
};
static_assert(sizeof(report) <= report_bytes);

// Worker exit codes besides 0.
constexpr int rc_setup = 3;        // bad arguments, no device, stdin closed early
constexpr int rc_import = 4;       // open_import or a device copy failed
constexpr int rc_stale = 20;       // the payload's checksum was not the expected one
constexpr int rc_downstream = 21;  // ipc/relay: its child failed or saw stale bytes

std::uint64_t fnv1a(const unsigned char* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::vector<unsigned char> random_bytes(std::size_t n, std::uint64_t seed) {
  rng r(seed);
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t x = r.next();
    std::memcpy(v.data() + i, &x, std::min<std::size_t>(8, n - i));
  }
  return v;
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(v));
  return buf;
}

long long ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration_cast<ms>(b - a).count();
}

// Device memory is read and written through copies (cuda's is not host-addressable), on the
// default stream: unordered with the streams the scenarios make busy on purpose.
core::status read_device(dev::backend& d, void* host, const void* device, std::size_t n) {
  if (auto s = d.copy_async(host, device, n, {}); !s) return s;
  return d.synchronize_stream({});
}
core::status write_device(dev::backend& d, void* device, const void* host, std::size_t n) {
  if (auto s = d.copy_async(device, host, n, {}); !s) return s;
  return d.synchronize_stream({});
}

std::byte* at(void* base, std::size_t offset) { return static_cast<std::byte*>(base) + offset; }

core::status read_report(dev::backend& d, void* buffer, int index, report& out) {
  return read_device(d, &out, at(buffer, reports_at + static_cast<std::size_t>(index) * report_bytes), sizeof out);
}

// "ipc-ready.PID" in the working directory (a scenario run's own directory, shared by its
// processes): the child PID has its device up (and, an importer, waits for its handle).
std::string ready_file_of(pid_t pid) { return "ipc-ready." + std::to_string(pid); }

void announce_ready() {
  const int fd = ::open(ready_file_of(::getpid()).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
}

// --- timing ------------------------------------------------------------------------------------

// Every wait on a child counts from the moment the child said its device is up (its ready file),
// never from its start: how long a device runtime takes to come up depends on the machine's load
// (on an H100 at --jobs 16, sixteen runs' contexts at once made a child's CUDA start outlast a
// 3 s join timeout counted from the spawn, and clean runs failed). The start itself has a bound
// of its own, far above what a loaded machine takes, so a child that never comes up still fails
// the parent cleanly. The bugs' hangs do not depend on these numbers: a bug path blocks without
// a bound, and the slow child's delay (600 s) outlasts every outer timeout.
struct timing {
  ms outer;          // the outer timeout these numbers are made for
  ms budget;         // the run must end (cleanly) within this: outer - 10%
  ms startup_bound;  // a child's start, from its spawn until its device is up
  ms child_timeout;  // a child's report, from its device up
  ms exit_timeout;   // a released child's exit (its runtime's teardown included)
  ms chain_timeout;  // reexport-chain: B's report, from B's device up (C's start and round)
  ms close_bound;    // the fixed protocol's close, after the kill: a backstop
  ms busy_stream;    // reexport-chain: how long B's stream is busy before its write lands
};

constexpr int registered_timeout_ms = 3500;
constexpr int cuda_timeout_ms = 30000;

timing timing_for(dev::backend_kind kind) {
  const bool cuda = kind == dev::backend_kind::cuda;
  const ms outer(cuda ? cuda_timeout_ms : registered_timeout_ms);
  const ms startup = cuda ? 12000ms : 1000ms;
  const ms child = cuda ? 3000ms : 400ms;
  // A released child's exit under load: at --jobs 8 on 2 cores one took over 600 ms (1 of 300).
  const ms exit = cuda ? 6000ms : 1500ms;
  const ms busy = cuda ? 1500ms : 200ms;
  return {.outer = outer,
          .budget = outer * 9 / 10,
          .startup_bound = startup,
          .child_timeout = child,
          .exit_timeout = exit,
          // B after its device is up: C's start, the busy stream, C's report and exit.
          .chain_timeout = startup + busy + child + exit,
          .close_bound = cuda ? 2000ms : 500ms,
          .busy_stream = busy};
}

// What the binding's close did: no bound at all (a day is forever for a run).
constexpr ms unbounded_close = std::chrono::hours(24);

// --- the parent's side: children, their reports, the protocol --------------------------------

// The children of one parent, started through faults::launcher; each is fed its handle and
// released through its stdin pipe. Leftovers are SIGKILLed and reaped with the launcher.
class child_group {
 public:
  struct child {
    std::string name;
    int index;
    pid_t pid;
    int go_fd;
    clock_type::time_point started;
    clock_type::time_point ready{};  // when its ready file was seen (its device is up)
    int end_status = -1;  // exit code or 128 + signal once it ended
  };

  /// `startup_bound`: how long a child may take from its spawn until its device is up.
  child_group(rng& seeds, ms startup_bound)
      : launcher_({"/proc/self/exe", "worker"}, faults::current_spec(), seeds), startup_bound_(startup_bound) {}
  ~child_group() { release(); }
  child_group(const child_group&) = delete;
  child_group& operator=(const child_group&) = delete;

  core::result<pid_t> start(std::string_view worker, int index, const std::vector<std::string>& args,
                            std::string_view extra_faults = {}) {
    int go = -1;
    auto pid = launcher_.start(worker, args, extra_faults, &go);
    if (!pid) return pid.error();
    children_.push_back({std::string(worker) + "#" + std::to_string(index), index, *pid, go, clock_type::now()});
    return *pid;
  }

  /// Writes `line` and a newline to the child's stdin.
  core::status send(const child& c, const std::string& line) {
    const std::string text = line + "\n";
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(c.go_fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return core::status::from_errno(errno, "write the handle to " + c.name);
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

  /// Waits until every child has reported (`reported(index)`) or ended, each at most `timeout`
  /// from the moment its device came up (and its start at most the group's startup bound).
  /// A child that ends is noted at once but the wait goes on for the others, so that every
  /// child still alive has imported when the parent acts. ok when all reported; else timeout
  /// naming the overdue ones, or internal naming the ones that ended first (their status).
  core::status wait_reported(const std::function<bool(int)>& reported, ms timeout) {
    for (;;) {
      const auto now = clock_type::now();
      std::vector<const child*> late, ended, not_up, overdue;
      clock_type::time_point due_last{};
      for (child& c : children_) {
        if (reported(c.index)) continue;
        if (c.end_status < 0) c.end_status = launcher_.wait(c.pid, 0ms);
        if (c.end_status >= 0) {
          ended.push_back(&c);
          continue;
        }
        late.push_back(&c);
        if (c.ready == clock_type::time_point{} && ::access(ready_file_of(c.pid).c_str(), F_OK) == 0) c.ready = now;
        const bool up = c.ready != clock_type::time_point{};
        const auto due = up ? c.ready + timeout : c.started + startup_bound_;
        if (now < due) continue;
        (up ? overdue : not_up).push_back(&c);
        due_last = std::max(due_last, due);
      }
      if (late.empty() && ended.empty()) return {};
      if (late.empty() || !overdue.empty() || !not_up.empty()) {
        last_deadline_ = due_last != clock_type::time_point{} ? due_last : now;
        if (!ended.empty()) return {core::errc::internal, names(ended, true) + " before reporting"};
        if (!overdue.empty()) {
          return {core::errc::timeout, names(overdue, false) + " did not report within its " +
                                           std::to_string(timeout.count()) + " ms timeout (from its device up)"};
        }
        return {core::errc::timeout, names(not_up, false) + " did not bring its device up within " +
                                         std::to_string(startup_bound_.count()) + " ms of its start"};
      }
      ::usleep(1000);
    }
  }

  /// EOF on every child's stdin: they let their imports go and exit.
  void release() {
    for (child& c : children_) {
      if (c.go_fd >= 0) ::close(c.go_fd);
      c.go_fd = -1;
    }
  }

  /// Waits at most `timeout` for every child to exit 0. ok, or timeout / internal naming them.
  core::status join(ms timeout) {
    const auto deadline = clock_type::now() + timeout;
    std::vector<const child*> running, failed;
    for (child& c : children_) {
      const auto left = std::max(ms(0), std::chrono::duration_cast<ms>(deadline - clock_type::now()));
      if (c.end_status < 0) c.end_status = launcher_.wait(c.pid, left);
      if (c.end_status < 0) {
        running.push_back(&c);
      } else if (c.end_status != 0) {
        failed.push_back(&c);
      }
    }
    if (!failed.empty()) return {core::errc::internal, names(failed, true)};
    if (!running.empty()) {
      return {core::errc::timeout, names(running, false) + " did not exit within " + std::to_string(timeout.count()) + " ms"};
    }
    return {};
  }

  /// SIGKILLs and reaps every child still running; their names.
  std::vector<std::string> kill_survivors() {
    std::vector<std::string> killed;
    for (child& c : children_) {
      if (c.end_status < 0) c.end_status = launcher_.wait(c.pid, 0ms);
      if (c.end_status < 0) killed.push_back(c.name);
    }
    launcher_.kill_all();
    for (child& c : children_) {
      if (c.end_status < 0) c.end_status = 128 + SIGKILL;
    }
    release();
    return killed;
  }

  [[nodiscard]] const std::vector<child>& children() const noexcept { return children_; }
  [[nodiscard]] const faults::launcher& launcher() const noexcept { return launcher_; }
  /// When the last failed wait_reported's deadline was (the moment a late child exceeded it).
  [[nodiscard]] clock_type::time_point last_deadline() const noexcept { return last_deadline_; }

 private:
  static std::string describe_end(int status) {
    if (status > 128) {
      const char* abbrev = sigabbrev_np(status - 128);
      return std::string("was killed by ") + (abbrev != nullptr ? "SIG" + std::string(abbrev) : std::to_string(status - 128));
    }
    return "exited " + std::to_string(status);
  }
  static std::string names(const std::vector<const child*>& cs, bool with_end) {
    std::string out;
    for (const child* c : cs) {
      if (!out.empty()) out += ", ";
      out += "child " + c->name + " (pid " + std::to_string(c->pid) + ")";
      if (with_end) out += " " + describe_end(c->end_status);
    }
    return out;
  }

  faults::launcher launcher_;
  ms startup_bound_;
  std::vector<child> children_;
  clock_type::time_point last_deadline_{};
};

// How a protocol run ended.
struct protocol_result {
  core::status outcome;                       // ok, or the clean failure's reason
  std::vector<ipc::holder> holders_at_failure;  // who held imports when the failure was seen
  std::vector<std::string> killed;
  core::status close_status;
  clock_type::time_point failure_seen{};
  clock_type::time_point finished{};
  long long kill_ms = 0;
  long long close_ms = 0;
};

// The parent's protocol, fixed: every wait is checked; on a failure the survivors are killed
// before anything else and only then is the pool closed (bounded, though by then no live child
// can hold an import). The bug points take the pre-fix paths:
//   bug/ipc/unchecked-join     the results of both waits are dropped and the pool is closed the
//                              binding's way, without a bound: a late child holding its import
//                              wedges the parent.
//   bug/ipc/close-before-kill  on a failure, the pool is closed (without a bound) before the
//                              survivors are killed: children holding imports, waiting for a
//                              release that never comes, wedge it.
//
// `before_close` runs right before the pool is closed on the fixed paths (the caller's last look
// at the shared bytes: a closed pool's memory is gone).
protocol_result run_protocol(ipc::pool& pool, child_group& kids, const std::function<bool(int)>& reported,
                             ms report_timeout, ms exit_timeout, ms close_bound,
                             const std::function<void()>& before_close) {
  protocol_result r;
  const bool unchecked = FAULTLINE_BUG("bug/ipc/unchecked-join");
  auto fail_cleanly = [&](core::status reason) {
    r.failure_seen = clock_type::now();
    if (auto h = pool.holders()) r.holders_at_failure = *h;
    if (FAULTLINE_BUG("bug/ipc/close-before-kill")) (void)pool.close(unbounded_close);
    const auto t0 = clock_type::now();
    r.killed = kids.kill_survivors();
    before_close();
    const auto t1 = clock_type::now();
    r.close_status = pool.close(close_bound);
    r.finished = clock_type::now();
    r.kill_ms = ms_between(t0, t1);
    r.close_ms = ms_between(t1, r.finished);
    r.outcome = std::move(reason);
    return r;
  };
  core::status s = kids.wait_reported(reported, report_timeout);
  if (!s && !unchecked) return fail_cleanly(s);
  kids.release();
  s = kids.join(exit_timeout);
  if (!s && !unchecked) return fail_cleanly(s);
  before_close();
  r.close_status = pool.close(unchecked ? unbounded_close : close_bound);
  r.finished = clock_type::now();
  r.outcome = r.close_status;
  return r;
}

// --- set-up shared by the scenarios ------------------------------------------------------------

struct arena {
  dev::backend* device = nullptr;
  std::unique_ptr<ipc::pool> pool;
  void* buffer = nullptr;
  ipc::handle handle;
  std::uint64_t payload_sum = 0;
  // The children's blocks and reports as they were right before the pool closed.
  std::vector<unsigned char> results;

  // What report_reader and the checks read once the pool is closed.
  std::function<void()> capture(context& ctx) {
    return [this, &ctx] {
      results.assign(buffer_bytes - blocks_at, 0);
      const core::status s = read_device(*device, results.data(), at(buffer, blocks_at), results.size());
      ctx.require(s.is_ok(), "results-readable", s.to_string());
    };
  }
  [[nodiscard]] report captured_report(int index) const {
    report rep{};
    if (!results.empty()) std::memcpy(&rep, results.data() + (reports_at - blocks_at) + index * report_bytes, sizeof rep);
    return rep;
  }
  [[nodiscard]] std::uint64_t captured_block_sum(int index) const {
    if (results.empty()) return 0;
    return fnv1a(results.data() + index * block_bytes, block_bytes);
  }
};

// A pool, a zeroed buffer with a random payload at payload_a, exported.
arena make_arena(context& ctx) {
  arena a;
  auto d = dev::select_backend();
  ctx.require(d.has_value(), "device-selected", d ? std::string() : d.error().to_string());
  a.device = *d;
  auto p = ipc::pool::create(*a.device, {.device = 0, .bytes = 1 << 20});
  ctx.require(p.has_value(), "pool-created", p ? std::string() : p.error().to_string());
  a.pool = std::move(*p);
  auto b = a.pool->allocate(buffer_bytes);
  ctx.require(b.has_value(), "buffer-allocated", b ? std::string() : b.error().to_string());
  a.buffer = *b;
  std::vector<unsigned char> zeros(buffer_bytes, 0);
  ctx.require(write_device(*a.device, a.buffer, zeros.data(), zeros.size()).is_ok(), "buffer-written");
  const auto payload = random_bytes(payload_bytes, ctx.random().next());
  a.payload_sum = fnv1a(payload.data(), payload.size());
  ctx.require(write_device(*a.device, at(a.buffer, payload_a), payload.data(), payload.size()).is_ok(), "buffer-written");
  auto h = a.pool->export_handle(a.buffer);
  ctx.require(h.has_value(), "buffer-exported", h ? std::string() : h.error().to_string());
  a.handle = *h;
  return a;
}

std::function<bool(int)> report_reader(context& ctx, const arena& a) {
  return [&ctx, &a](int index) {
    report rep{};
    const core::status s = read_report(*a.device, a.buffer, index, rep);
    ctx.require(s.is_ok(), "reports-readable", s.to_string());
    return rep.magic == report_magic;
  };
}

void start_importers(context& ctx, child_group& kids, const arena& a, int count, int special,
                     std::string_view special_faults) {
  for (int i = 0; i < count; ++i) {
    auto pid = kids.start("ipc/importer", i, {std::to_string(i), std::to_string(payload_a), hex(a.payload_sum)},
                          i == special ? special_faults : std::string_view{});
    ctx.require(pid.has_value(), "worker-started", pid ? std::string() : pid.error().to_string());
    ctx.note("worker " + kids.children().back().name + " pid " + std::to_string(*pid) +
             (i == special ? " faults " + std::string(special_faults) : std::string()));
    ctx.require(kids.send(kids.children().back(), ipc::to_string(a.handle)).is_ok(), "handle-sent");
  }
}

// Every child that reported must have read the exporter's bytes and written its own block.
void check_reports(context& ctx, const arena& a, const child_group& kids) {
  for (const auto& c : kids.children()) {
    const report rep = a.captured_report(c.index);
    if (rep.magic != report_magic) continue;
    ctx.check(rep.verdict == verdict_ok && rep.seen_sum == a.payload_sum, "importer-read-the-exported-bytes",
              "child " + c.name + " read checksum " + hex(rep.seen_sum) + ", exported " + hex(a.payload_sum));
    ctx.check(a.captured_block_sum(c.index) == rep.block_sum, "exporter-reads-the-importers-bytes",
              "child " + c.name + "'s block does not carry the checksum it reported");
  }
}

// What every scenario's clean run must show once the protocol has failed cleanly: no child left
// running, the pool closed after the kill (killed importers are not counted), all within budget.
void check_clean_end(context& ctx, clock_type::time_point start, const protocol_result& r, const child_group& kids,
                     const timing& t) {
  const long long total = ms_between(start, r.finished);
  ctx.check(total <= t.budget.count(), "failed-within-budget",
            std::to_string(total) + " ms from the start to the clean failure; budget " + std::to_string(t.budget.count()) +
                " ms (outer timeout " + std::to_string(t.outer.count()) + " ms - 10%)");
  ctx.check(r.close_status, "pool-closed-after-the-kill");
  for (const auto& c : kids.children()) {
    ctx.check(c.end_status >= 0, "no-child-left-running", "child " + c.name + " (pid " + std::to_string(c.pid) + ")");
  }
}

// ================================================================================================
// Workers
// ================================================================================================

// Reads one line from stdin (the handle); false at EOF before a newline.
bool read_line(std::string& out) {
  out.clear();
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    if (out.size() > 4096) return false;
    out.push_back(c);
  }
}

// Blocks until EOF on stdin: the parent's release (or the parent's death).
void wait_for_release() {
  char buf[64];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR)) return;
  }
}

dev::backend* worker_device(const char* who) {
  auto d = dev::select_backend();
  if (!d) {
    std::fprintf(stderr, "[%s] %s\n", who, d.error().to_string().c_str());
    return nullptr;
  }
  // The runtime comes up before the handle arrives, as a child's interpreter would start: its
  // cost is not in the window between the export and the read. Counting devices does not make a
  // CUDA context; synchronising the device does (the primary context, which the import uses).
  if (auto n = (*d)->device_count(); !n) {
    std::fprintf(stderr, "[%s] %s\n", who, n.error().to_string().c_str());
    return nullptr;
  }
  if (auto up = (*d)->synchronize_device(); !up) {
    std::fprintf(stderr, "[%s] %s\n", who, up.to_string().c_str());
    return nullptr;
  }
  return *d;
}

std::unique_ptr<ipc::mapping> worker_import(const char* who, dev::backend& d) {
  std::string line;
  if (!read_line(line)) {
    std::fprintf(stderr, "[%s] stdin closed before a handle arrived\n", who);
    return nullptr;
  }
  auto h = ipc::parse_handle(line);
  if (!h) {
    std::fprintf(stderr, "[%s] %s\n", who, h.error().to_string().c_str());
    return nullptr;
  }
  auto m = ipc::open_import(d, *h);
  if (!m) {
    std::fprintf(stderr, "[%s] open_import: %s\n", who, m.error().to_string().c_str());
    return nullptr;
  }
  return std::move(*m);
}

// Checks the payload at `offset` against `want`, writes this child's block and its report.
int check_and_report(const char* who, dev::backend& d, ipc::mapping& m, int index, std::size_t offset,
                     std::uint64_t want, std::uint32_t detail, rng& random, bool& stale) {
  std::vector<unsigned char> payload(payload_bytes);
  if (!read_device(d, payload.data(), at(m.data(), offset), payload_bytes)) return rc_import;
  const std::uint64_t seen = fnv1a(payload.data(), payload.size());
  stale = seen != want;
  if (stale) {
    std::fprintf(stderr, "[%s] read stale bytes: checksum %s, expected %s\n", who, hex(seen).c_str(), hex(want).c_str());
  }
  // The spawn-delay and kill injectors' point: the child holds its import and has not reported.
  (void)FAULTLINE_POINT("ipc/child/holding");
  const auto block = random_bytes(block_bytes, random.next());
  if (!write_device(d, at(m.data(), blocks_at + static_cast<std::size_t>(index) * block_bytes), block.data(), block_bytes)) {
    return rc_import;
  }
  report rep{};
  rep.index = static_cast<std::uint32_t>(index);
  rep.pid = core::host_pid();
  rep.seen_sum = seen;
  rep.want_sum = want;
  rep.verdict = detail != 0 ? verdict_downstream : stale ? verdict_stale : verdict_ok;
  rep.detail = detail;
  rep.block_sum = fnv1a(block.data(), block.size());
  // The magic last, in a second copy: a parent never sees a half-written report as complete.
  std::byte* slot = at(m.data(), reports_at + static_cast<std::size_t>(index) * report_bytes);
  if (!write_device(d, slot + sizeof rep.magic, reinterpret_cast<const std::byte*>(&rep) + sizeof rep.magic,
                    sizeof rep - sizeof rep.magic)) {
    return rc_import;
  }
  rep.magic = report_magic;
  if (!write_device(d, slot, &rep.magic, sizeof rep.magic)) return rc_import;
  return 0;
}

// ipc/importer INDEX PAYLOAD_OFFSET EXPECTED_SUM: imports the handle on its stdin, then (after
// ipc/child/start, the spawn-delay injector's point) checks the payload, writes its block and
// report, holds the import until EOF on stdin, releases it and exits: 0, or rc_stale when the
// payload was not the expected one.
//
// The import comes first, as in the anchor: the binding's child unpickles (imports) the buffer
// it was given before its own code starts, and it was the code after that a sanitizer made slow.
int importer_worker(const std::vector<std::string>& args, rng& random) {
  if (args.size() != 3) return rc_setup;
  const int index = std::atoi(args[0].c_str());
  const std::size_t offset = std::strtoull(args[1].c_str(), nullptr, 10);
  const std::uint64_t want = std::strtoull(args[2].c_str(), nullptr, 16);
  if (index < 0 || index >= max_children || offset + payload_bytes > blocks_at) return rc_setup;
  dev::backend* d = worker_device("ipc/importer");
  if (d == nullptr) return rc_setup;
  announce_ready();
  auto m = worker_import("ipc/importer", *d);
  if (!m) return rc_import;
  (void)FAULTLINE_POINT("ipc/child/start");
  bool stale = false;
  if (int rc = check_and_report("ipc/importer", *d, *m, index, offset, want, 0, random, stale); rc != 0) return rc;
  wait_for_release();
  if (auto s = m->close(); !s) {
    std::fprintf(stderr, "[ipc/importer] close: %s\n", s.to_string().c_str());
    return rc_import;
  }
  return stale ? rc_stale : 0;
}

// ipc/relay BUSY_MS CHAIN_TIMEOUT_MS EXPECTED_SUM: B of A -> B -> C. Imports A's buffer (handle
// on stdin); draws its own payload for C and starts C (ipc/importer, index 1, told that payload's
// checksum) at once, so C is up when its handle comes; writes the payload at payload_b with a
// device copy on a stream kept busy first (a long kernel that ends BUSY_MS after C announced its
// device up, or once C has reported), re-exports the buffer with
// the copy's event as `ready`, and sends C the handle. Then it runs the fixed protocol on C
// (report within BUSY_MS + the child timeout of C's device up, release, join; kill on failure), writes its own report (index
// 0: A's payload checked; verdict downstream when C failed), holds its import until A releases
// it, and exits: 0, rc_stale (A's payload was wrong) or rc_downstream (C failed).
int relay_worker(const std::vector<std::string>& args, rng& random) {
  if (args.size() != 3) return rc_setup;
  const ms busy(std::atoll(args[0].c_str()));
  const ms chain_timeout(std::atoll(args[1].c_str()));
  const std::uint64_t want = std::strtoull(args[2].c_str(), nullptr, 16);
  std::signal(SIGPIPE, SIG_IGN);
  dev::backend* d = worker_device("ipc/relay");
  if (d == nullptr) return rc_setup;
  announce_ready();  // A's wait for this child's report counts from here
  const timing t = timing_for(d->kind());
  auto m = worker_import("ipc/relay", *d);
  if (!m) return rc_import;

  const auto mine = random_bytes(payload_bytes, random.next());
  child_group kids(random, t.startup_bound);
  if (!kids.start("ipc/importer", 1, {"1", std::to_string(payload_b), hex(fnv1a(mine.data(), mine.size()))})) {
    return rc_setup;
  }
  // The "kernel": a device-to-device copy from this process's own scratch memory, queued behind
  // other work on its stream that lasts until C has had BUSY_MS with its device up (or has
  // reported). A fixed length from now would let a slowly starting C read after the copy landed
  // (on the H100 at --jobs 12, C's CUDA start outlasted 1.5 s in 6 of 65 runs and the bug
  // escaped): counted from C's start, a C given the handle before the copy landed reads the old
  // bytes on every run, and the fix, which waits for the copy before exporting, waits that long.
  // The gate is opened by a thread of its own: this one may be blocked in device calls meanwhile.
  ipc::host_gate gate;
  gate.bound = chain_timeout;  // the last resort: the opener decides
  const pid_t c_pid = kids.children()[0].pid;
  std::thread opener([&gate, c_pid, busy, chain_timeout] {
    auto open_by = clock_type::now() + chain_timeout;
    while (!gate.open.load() && clock_type::now() < open_by) {
      if (::access(ready_file_of(c_pid).c_str(), F_OK) == 0) open_by = std::min(open_by, clock_type::now() + busy);
      std::this_thread::sleep_for(1ms);
    }
    gate.open.store(true, std::memory_order_release);
  });
  auto scratch = d->allocate(payload_bytes);
  auto s = d->create_stream();
  auto e = d->create_event();
  if (!scratch || !s || !e || !write_device(*d, *scratch, mine.data(), payload_bytes) ||
      !ipc::launch_host_gate(*d, *s, &gate) ||
      !d->copy_async(at(m->data(), payload_b), *scratch, payload_bytes, *s) || !d->record_event(*e, *s)) {
    std::fprintf(stderr, "[ipc/relay] could not queue the write of its payload\n");
    gate.open.store(true);
    opener.join();
    return rc_setup;
  }
  auto h = m->reexport(*e);  // the fix waits for the write; bug/ipc/dropped-event-wait does not
  core::status st = h ? kids.send(kids.children()[0], ipc::to_string(*h)) : h.error();
  if (st) {
    auto reported = [&](int index) {
      report rep{};
      return read_report(*d, m->data(), index, rep).is_ok() && rep.magic == report_magic;
    };
    // C reports once the gate has opened (BUSY_MS after its device came up) and it has read.
    st = kids.wait_reported(reported, busy + t.child_timeout);
    gate.open.store(true, std::memory_order_release);
    if (st) {
      kids.release();
      st = kids.join(t.exit_timeout);
    }
  }
  if (!st) {
    kids.kill_survivors();
    std::fprintf(stderr, "[ipc/relay] its child failed: %s\n", st.to_string().c_str());
  }
  const int c_status = kids.children()[0].end_status;
  gate.open.store(true, std::memory_order_release);
  opener.join();
  (void)d->synchronize_stream(*s);
  (void)d->destroy_event(*e);
  (void)d->destroy_stream(*s);
  (void)d->deallocate(*scratch);

  bool stale = false;
  const auto detail = static_cast<std::uint32_t>(c_status == 0 ? 0 : c_status < 0 ? 255 : c_status);
  if (int rc = check_and_report("ipc/relay", *d, *m, 0, payload_a, want, detail, random, stale); rc != 0) return rc;
  wait_for_release();
  if (auto c = m->close(); !c) {
    std::fprintf(stderr, "[ipc/relay] close: %s\n", c.to_string().c_str());
    return rc_import;
  }
  return stale ? rc_stale : c_status != 0 ? rc_downstream : 0;
}

// ================================================================================================
// ipc/slow-child
// ================================================================================================
// Bug: cuda-python #2124. A child's start is delayed past the parent's join timeout (a sanitizer
//   build); the parent ignores the timed-out wait and closes the pool, which blocks forever on the
//   import the child still holds.
// Drives: an IPC pool with a checksummed payload, exported; two ipc/importer children, the
//   second one's start delayed 30 s after its import (spawn-delay injector
//   ipc/child/start=delay(600s) in its own spec). The parent runs the protocol with its join
//   timeout (400 ms on the sim, 3 s on cuda, from its device up).
// Faults: the delayed start.
// Invariants: the parent fails cleanly: its reason is a timeout naming the slow child
//   (parent-failed-cleanly), the survivors are killed and the pool then closes at once (the
//   killed importers are not counted: pool-closed-after-the-kill), all within the budget, 90% of
//   the outer timeout (failed-within-budget); the children that did report read the exported
//   bytes and wrote theirs (importer-read-the-exported-bytes, exporter-reads-the-importers-bytes).
//   Noted: how long after the child exceeded its timeout the parent had failed cleanly.
// Expected: clean passes. bug/ipc/unchecked-join: hang (the parent, past its dropped waits,
//   blocks in ipc::pool::close on the slow child's import). bug/ipc/close-before-kill: hang (the
//   parent blocks in ipc::pool::close before killing anyone).
void slow_child(context& ctx) {
  std::signal(SIGPIPE, SIG_IGN);
  const auto start = clock_type::now();
  arena a = make_arena(ctx);
  const timing t = timing_for(a.device->kind());
  child_group kids(ctx.random(), t.startup_bound);
  constexpr int slow = 1;
  start_importers(ctx, kids, a, 2, slow, "ipc/child/start=delay(600s)");
  const protocol_result r =
      run_protocol(*a.pool, kids, report_reader(ctx, a), t.child_timeout, t.exit_timeout, t.close_bound, a.capture(ctx));

  const std::string slow_name = kids.children()[slow].name;
  ctx.check(r.outcome.code() == core::errc::timeout && r.outcome.message().find(slow_name) != std::string::npos,
            "parent-failed-cleanly",
            "expected a timeout naming " + slow_name + ", got " + (r.outcome ? std::string("success") : r.outcome.to_string()));
  check_clean_end(ctx, start, r, kids, t);
  if (r.failure_seen != clock_type::time_point{}) {
    const long long after = ms_between(kids.last_deadline(), r.finished);
    ctx.note("clean failure " + std::to_string(after) + " ms after " + slow_name + " exceeded its " +
             std::to_string(t.child_timeout.count()) + " ms timeout (kill " + std::to_string(r.kill_ms) + " ms, close " +
             std::to_string(r.close_ms) + " ms; killed " + std::to_string(r.killed.size()) + "); " +
             std::to_string(ms_between(start, r.finished)) + " ms from the start, budget " +
             std::to_string(t.budget.count()) + " ms");
    ctx.note("failure: " + r.outcome.to_string());
  }
  check_reports(ctx, a, kids);
}

// ================================================================================================
// ipc/child-killed-holding-import
// ================================================================================================
// Bug: the same tree when a child dies instead of being late: a child is SIGKILLed (an OOM kill,
//   a crash) while it holds an import, and the parent, seeing the failure, closes the pool before
//   killing the other children, which hold their imports and wait for a release that never comes.
// Drives: the exported pool of ipc/slow-child; two ipc/importer children, the first one
//   SIGKILLed right after it checked the payload, before reporting (ipc/child/holding=kill in its
//   own spec); the other imports, reports, and holds its import until released. The parent runs the protocol with its join timeout.
// Faults: the SIGKILL of a child holding an import.
// Invariants: the parent fails cleanly with a reason naming the killed child and its signal
//   (parent-failed-cleanly); when it sees the failure, the registry no longer counts the dead
//   importer (dead-importer-not-counted) but counts every child that reported
//   (live-importers-counted); the survivors are killed, the pool then closes at once, within
//   the budget, and the children that reported read and wrote the right bytes.
// Expected: clean passes. bug/ipc/close-before-kill: hang (the parent blocks in ipc::pool::close
//   on the import of the child it has not killed).
void child_killed_holding_import(context& ctx) {
  std::signal(SIGPIPE, SIG_IGN);
  const auto start = clock_type::now();
  arena a = make_arena(ctx);
  const timing t = timing_for(a.device->kind());
  child_group kids(ctx.random(), t.startup_bound);
  constexpr int victim = 0;
  start_importers(ctx, kids, a, 2, victim, "ipc/child/holding=kill");
  const protocol_result r =
      run_protocol(*a.pool, kids, report_reader(ctx, a), t.child_timeout, t.exit_timeout, t.close_bound, a.capture(ctx));

  const auto& v = kids.children()[victim];
  ctx.check(!r.outcome && r.outcome.message().find(v.name) != std::string::npos &&
                r.outcome.message().find("SIGKILL") != std::string::npos,
            "parent-failed-cleanly",
            "expected a failure naming " + v.name + " killed by SIGKILL, got " +
                (r.outcome ? std::string("success") : r.outcome.to_string()));
  const auto held_by = [&r](pid_t pid) {
    return std::any_of(r.holders_at_failure.begin(), r.holders_at_failure.end(),
                       [pid](const ipc::holder& h) { return h.ns_pid == pid; });
  };
  ctx.check(!held_by(v.pid), "dead-importer-not-counted",
            "the registry still counted the killed child: " + ipc::describe(r.holders_at_failure));
  for (const auto& c : kids.children()) {
    if (c.index == victim || a.captured_report(c.index).magic != report_magic) continue;
    ctx.check(held_by(c.pid), "live-importers-counted",
              "child " + c.name + " reported (it holds its import) but the registry lists " +
                  ipc::describe(r.holders_at_failure));
  }
  check_clean_end(ctx, start, r, kids, t);
  if (r.failure_seen != clock_type::time_point{}) {
    ctx.note("failure: " + r.outcome.to_string() + "; holders then: " + ipc::describe(r.holders_at_failure) +
             "; clean failure " + std::to_string(ms_between(r.failure_seen, r.finished)) + " ms after it was seen");
  }
  check_reports(ctx, a, kids);
}

// ================================================================================================
// ipc/reexport-chain
// ================================================================================================
// Bug: numba-cuda #930, in the re-export chain of cuda-python #2124's class: A exports to B, B
//   writes its own data into the buffer on a stream and re-exports to C; the handle was made
//   before the stream that filled the buffer had finished (the wait's not-ready result was
//   dropped), so C read stale bytes: the buffer's previous contents.
// Drives: A (this process) fills payload_a, writes "previous contents" at payload_b, exports;
//   B (ipc/relay) imports, checks A's payload, starts C, writes its payload at payload_b through
//   a device copy queued behind a busy stream (200 ms on the sim, 1.5 s on cuda), re-exports
//   with the copy's event as ready, and hands C the handle; C (ipc/importer) imports it,
//   checks B's payload, writes its block and report into A's buffer. Each parent runs the fixed
//   protocol on its child; A's join timeout covers the whole chain.
// Faults: the busy stream (launch_host_gate: busy until C has had the busy time with its device
//   up, or has reported), which makes an unsynchronised read observable on every run.
// Invariants: C read exactly B's payload (importer-read-the-exported-bytes), B read A's
//   (relay-read-the-exported-bytes); both reported and wrote their blocks into A's buffer, which A
//   reads back (exporter-reads-the-importers-bytes); B's and C's imports counted in A's registry
//   and released: the chain completes and A's pool closes (chain-completed), within the budget.
// Expected: clean passes. bug/ipc/dropped-event-wait: fail importer-read-the-exported-bytes (C
//   read the buffer's previous contents; its checksum says so) — a corruption, detected as a
//   failure rather than a hang: a dropped wait on data hangs nothing, it lets a reader in early.
void reexport_chain(context& ctx) {
  std::signal(SIGPIPE, SIG_IGN);
  const auto start = clock_type::now();
  arena a = make_arena(ctx);
  const timing t = timing_for(a.device->kind());
  const auto previous = random_bytes(payload_bytes, ctx.random().next());
  const std::uint64_t previous_sum = fnv1a(previous.data(), previous.size());
  ctx.require(write_device(*a.device, at(a.buffer, payload_b), previous.data(), payload_bytes).is_ok(), "buffer-written");

  child_group kids(ctx.random(), t.startup_bound);
  auto b = kids.start("ipc/relay", 0, {std::to_string(t.busy_stream.count()), std::to_string(t.chain_timeout.count()),
                                       hex(a.payload_sum)});
  ctx.require(b.has_value(), "worker-started", b ? std::string() : b.error().to_string());
  ctx.note("worker " + kids.children()[0].name + " pid " + std::to_string(*b));
  ctx.require(kids.send(kids.children()[0], ipc::to_string(a.handle)).is_ok(), "handle-sent");
  // A's wait for B's report covers B's whole round with C, from B's device up.
  const protocol_result r = run_protocol(*a.pool, kids, report_reader(ctx, a), t.chain_timeout, t.exit_timeout,
                                         t.close_bound, a.capture(ctx));

  const report rb = a.captured_report(0);
  const report rc = a.captured_report(1);
  if (ctx.check(rc.magic == report_magic, "reader-reported", "C left no report in A's buffer")) {
    std::string why = "C (pid " + std::to_string(rc.pid) + ") read checksum " + hex(rc.seen_sum) + ", B exported " +
                      hex(rc.want_sum);
    if (rc.seen_sum == previous_sum) why += ": the buffer's previous contents (the handle was published before B's write)";
    ctx.check(rc.seen_sum == rc.want_sum, "importer-read-the-exported-bytes", why);
  }
  if (ctx.check(rb.magic == report_magic, "relay-reported", "B left no report in A's buffer")) {
    ctx.check(rb.seen_sum == a.payload_sum, "relay-read-the-exported-bytes",
              "B read checksum " + hex(rb.seen_sum) + ", A exported " + hex(a.payload_sum));
  }
  for (int i = 0; i < 2; ++i) {
    const report& rep = i == 0 ? rb : rc;
    if (rep.magic != report_magic) continue;
    ctx.check(a.captured_block_sum(i) == rep.block_sum, "exporter-reads-the-importers-bytes",
              std::string(i == 0 ? "B" : "C") + "'s block does not carry the checksum it reported");
  }
  ctx.check(r.outcome, "chain-completed");
  const long long total = ms_between(start, r.finished);
  ctx.check(total <= t.budget.count(), "finished-within-budget",
            std::to_string(total) + " ms; budget " + std::to_string(t.budget.count()) + " ms");
  ctx.note("chain A -> B -> C " + std::to_string(total) + " ms (B's stream busy " + std::to_string(t.busy_stream.count()) +
           " ms)");
}

}  // namespace

void register_ipc_scenarios(registry& r) {
  // The soak's fault space (harness/campaign/fault_space.h): children that start late (well inside the
  // parent's join timeout) and device streams slowed at random.
  const std::vector<std::string> fault_space = {
      "ipc/child/start=1..50%delay(1ms..50ms)",
      "sim/stream/op=1..20%delay(1us..1ms)",
      "sim/allocate=1..20%delay(1us..1ms)"};
  const auto add = family_adder(r, fault_space);
  auto add_worker = [&r](std::string name, worker_fn fn) {
    add_worker_or_abort(r, std::move(name), std::move(fn));
  };
  add_worker("ipc/importer", importer_worker);
  add_worker("ipc/relay", relay_worker);
  const std::string hang = "hang: the parent blocks in ipc::pool::close on a child's import (outer timeout)";
  add({.name = "ipc/slow-child",
       .description = "a child's start delayed past the parent's join timeout while it holds an import (cuda-python #2124)",
       .timeout_ms = registered_timeout_ms,
       .cuda_timeout_ms = cuda_timeout_ms,
       .slots = 3,  // the parent and two children (A, B and C in the chain), each with a context
       .cpu_percent = 25,
       .run = slow_child,
       .bug_points = {{.point = "bug/ipc/unchecked-join",
                       .faults = "bug/ipc/unchecked-join=print",
                       .detect_rate = 0.95,
                       .expect = hang},
                      {.point = "bug/ipc/close-before-kill",
                       .faults = "bug/ipc/close-before-kill=print",
                       .detect_rate = 0.95,
                       .expect = hang}},
       .fault_space = fault_space_without(fault_space, "sim/allocate")});
  add({.name = "ipc/child-killed-holding-import",
       .description = "a child SIGKILLed while it holds an import; the parent must kill the rest before closing",
       .timeout_ms = registered_timeout_ms,
       .cuda_timeout_ms = cuda_timeout_ms,
       .slots = 3,  // the parent and two children (A, B and C in the chain), each with a context
       .cpu_percent = 25,
       .run = child_killed_holding_import,
       .bug_points = {{.point = "bug/ipc/close-before-kill",
                       .faults = "bug/ipc/close-before-kill=print",
                       .detect_rate = 0.95,
                       .expect = hang}},
       .fault_space = fault_space_without(fault_space, "sim/allocate")});
  add({.name = "ipc/reexport-chain",
       .description = "A exports to B, B re-exports to C before its write landed: stale bytes (numba-cuda #930)",
       .timeout_ms = registered_timeout_ms,
       .cuda_timeout_ms = cuda_timeout_ms,
       .slots = 3,  // the parent and two children (A, B and C in the chain), each with a context
       .cpu_percent = 25,
       .run = reexport_chain,
       .bug_points = {{.point = "bug/ipc/dropped-event-wait",
                       .faults = "bug/ipc/dropped-event-wait=print",
                       .detect_rate = 0.95,
                       .expect = "fail: importer-read-the-exported-bytes (C read the buffer's previous contents)"}}});
}

}  // namespace faultline::scenarios
