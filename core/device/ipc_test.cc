// Device IPC (ipc.h): an allocation exported by one process and imported by others is the same
// bytes both ways; the registry counts importers, a re-exported handle's importers included; a
// close waits for them, bounded, and its timeout names the holder; an importer that died
// (SIGKILL, zombie or reaped) is not counted; a handle exported with a ready event never shows
// stale bytes (and with bug/ipc/dropped-event-wait it does); every bad handle is an error value.
// Method: each test runs on the sim and on cuda (skipped without a GPU). Other processes are
// re-execs of this binary running the DISABLED_ child test with a role and a handle in the
// environment; they report through their exit codes and through the shared bytes themselves.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/device/detail/ipc_registry.h"
#include "core/device/device.h"
#include "core/device/ipc.h"
#include "core/points/point.h"
#include "core/testing/child.h"


namespace faultline::core::device::ipc {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

#if defined(FAULTLINE_FAULTS_ENABLED) && FAULTLINE_FAULTS_ENABLED
constexpr bool faults_compiled_in = true;
#else
constexpr bool faults_compiled_in = false;
#endif

// The shared buffer every multi-process test uses.
constexpr std::size_t buffer_bytes = 64 * 1024;
constexpr std::size_t parent_part = 0;          // written by the exporter
constexpr std::size_t child_part = 16 * 1024;   // written by an importer
constexpr std::size_t part_bytes = 16 * 1024;
constexpr std::size_t release_flag = buffer_bytes - 64;  // u64: importers holding let go when set

// Child exit codes.
constexpr int rc_import_failed = 3;
constexpr int rc_wrong_bytes = 4;
constexpr int rc_not_refused = 5;
constexpr int rc_never_released = 6;
constexpr int rc_setup = 7;

long long ms_since(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t).count();
}

backend* backend_named(const std::string& name) {
  if (name == "sim") return &sim();
  auto c = cuda();
  return c ? *c : nullptr;
}

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed * 7 + 1) & 0xff);
  return v;
}

// Device memory is not host-addressable on cuda: every access is a copy on the default stream.
status to_host(backend& dev, void* dst, const void* src, std::size_t n) {
  if (auto s = dev.copy_async(dst, src, n, {}); !s) return s;
  return dev.synchronize_stream({});
}
status to_device(backend& dev, void* dst, const void* src, std::size_t n) { return to_host(dev, dst, src, n); }

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = clock_type::now() + timeout;
  while (!done()) {
    if (clock_type::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// --- a tiny fault hook: arms one bug point by name ---------------------------------------------

std::atomic<const char*> armed_point{nullptr};
points::outcome hook(const char* name) noexcept {
  const char* a = armed_point.load(std::memory_order_acquire);
  if (a != nullptr && std::strcmp(a, name) == 0) return {true, 0};
  return {};
}
void arm(const char* name) {
  armed_point.store(name, std::memory_order_release);
  points::install_hook(&hook);
  points::set_armed(true);
}
void disarm() {
  points::set_armed(false);
  armed_point.store(nullptr);
}

// --- child processes ---------------------------------------------------------------------------

pid_t spawn_child(const std::string& role, const std::string& backend_name, const handle& h) {
  return faultline::core::testing::spawn_self("ipc_child.DISABLED_run",
                                     {"FAULTLINE_IPC_CHILD=" + role, "FAULTLINE_IPC_BACKEND=" + backend_name,
                                      "FAULTLINE_IPC_HANDLE=" + to_string(h)},
                                     {.drop_env_prefix = "FAULTLINE_IPC_", .quiet_stdout = true});
}

// Exit code, 128 + signal, or -1 after SIGKILLing a child still running at the deadline.
int wait_child(pid_t pid, std::chrono::milliseconds timeout = 20s) { return faultline::core::testing::wait_exit(pid, timeout); }

// Verifies the exporter's part of the buffer.
bool parent_bytes_ok(backend& dev, const mapping& m) {
  std::vector<unsigned char> seen(part_bytes);
  if (!to_host(dev, seen.data(), static_cast<const std::byte*>(m.data()) + parent_part, part_bytes)) return false;
  return seen == pattern(part_bytes, 1);
}

// Holds the import until the exporter sets the release flag (bounded).
int hold_until_released(backend& dev, const mapping& m) {
  const auto* flag = static_cast<const std::byte*>(m.data()) + release_flag;
  const bool released = wait_until(
      [&] {
        std::uint64_t v = 0;
        return to_host(dev, &v, flag, sizeof v).is_ok() && v != 0;
      },
      20s);
  return released ? 0 : rc_never_released;
}

int run_child(const std::string& role, backend& dev, const handle& h) {
  auto m = open_import(dev, h);
  if (role == "refused") {
    if (!m && m.code() == errc::refused) return 0;
    std::fprintf(stderr, "expected refused, got %s\n", m ? "an import" : m.error().to_string().c_str());
    return rc_not_refused;
  }
  if (!m) {
    std::fprintf(stderr, "open_import: %s\n", m.error().to_string().c_str());
    return rc_import_failed;
  }
  if (!parent_bytes_ok(dev, **m)) return rc_wrong_bytes;
  if (role == "verify-write") {
    const auto mine = pattern(part_bytes, 2);
    if (!to_device(dev, static_cast<std::byte*>((*m)->data()) + child_part, mine.data(), part_bytes)) return rc_setup;
    return (*m)->close().is_ok() ? 0 : rc_setup;
  }
  if (role == "hold") {
    const int rc = hold_until_released(dev, **m);
    return (*m)->close().is_ok() ? rc : rc_setup;
  }
  if (role == "relay") {
    // B of A -> B -> C: re-export, start C on this process's handle, wait for it.
    auto again = (*m)->reexport();
    if (!again) return rc_setup;
    const pid_t c = spawn_child("hold", std::string(dev.name()), *again);
    if (c < 0) return rc_setup;
    const int rc = wait_child(c);
    return (*m)->close().is_ok() ? rc : rc_setup;
  }
  return rc_setup;
}

TEST(ipc_child, DISABLED_run) {
  const char* role = std::getenv("FAULTLINE_IPC_CHILD");
  const char* name = std::getenv("FAULTLINE_IPC_BACKEND");
  const char* text = std::getenv("FAULTLINE_IPC_HANDLE");
  if (role == nullptr || name == nullptr || text == nullptr) return;  // a stray run: nothing to do
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the test (or the relay) that started it
  backend* dev = backend_named(name);
  auto h = parse_handle(text);
  const int rc = dev == nullptr || !h ? rc_setup : run_child(role, *dev, *h);
  std::fflush(nullptr);
  std::_Exit(rc);
}

// --- fixture -----------------------------------------------------------------------------------

class ipc : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dev_ = backend_named(GetParam());
    if (dev_ == nullptr) GTEST_SKIP() << "the cuda backend is not built";
    auto n = dev_->device_count();
    if (!n || *n == 0) GTEST_SKIP() << "no " << GetParam() << " device answers";
    auto p = pool::create(*dev_, {.device = 0, .bytes = 1 << 20});
    ASSERT_TRUE(p) << p.error().to_string();
    pool_ = std::move(*p);
    auto b = pool_->allocate(buffer_bytes);
    ASSERT_TRUE(b) << b.error().to_string();
    buffer_ = *b;
    const std::vector<unsigned char> zeros(buffer_bytes, 0);
    ASSERT_TRUE(to_device(*dev_, buffer_, zeros.data(), buffer_bytes));
    const auto mine = pattern(part_bytes, 1);
    ASSERT_TRUE(to_device(*dev_, static_cast<std::byte*>(buffer_) + parent_part, mine.data(), part_bytes));
  }
  void TearDown() override {
    disarm();
    for (pid_t c : children_) wait_child(c, 0ms);  // leftovers of a failed test: killed, reaped
    if (pool_) {
      release();
      EXPECT_TRUE(pool_->close(5s).is_ok());
    }
  }

  handle exported() {
    auto h = pool_->export_handle(buffer_);
    EXPECT_TRUE(h) << h.error().to_string();
    return h ? *h : handle{};
  }
  pid_t child(const std::string& role, const handle& h) {
    const pid_t pid = spawn_child(role, GetParam(), h);
    EXPECT_GT(pid, 0);
    if (pid > 0) children_.push_back(pid);
    return pid;
  }
  // wait_child for a child of this test (then forgotten: a reaped pid is never signalled).
  int wait(pid_t pid, std::chrono::milliseconds timeout = 20s) {
    std::erase(children_, pid);
    return wait_child(pid, timeout);
  }
  void release() {
    const std::uint64_t one = 1;
    (void)to_device(*dev_, static_cast<std::byte*>(buffer_) + release_flag, &one, sizeof one);
  }
  std::vector<holder> holders() {
    auto h = pool_->holders();
    EXPECT_TRUE(h) << h.error().to_string();
    return h ? *h : std::vector<holder>{};
  }
  bool holds(pid_t pid) {
    for (const holder& h : holders()) {
      if (h.ns_pid == pid) return true;
    }
    return false;
  }

  backend* dev_ = nullptr;
  std::unique_ptr<pool> pool_;
  void* buffer_ = nullptr;
  std::vector<pid_t> children_;
};

INSTANTIATE_TEST_SUITE_P(backends, ipc, ::testing::Values("sim", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// --- handles -----------------------------------------------------------------------------------

TEST(ipc_handle, round_trips_as_text) {
  handle h;
  h.magic = handle_magic;
  h.version = handle_version;
  h.backend = static_cast<std::uint8_t>(backend_kind::cuda);
  h.pool_id = 0x0123456789abcdefull;
  h.source_pid = 4242;
  h.registry_fd = 7;
  h.bytes = 4096;
  h.export_data[63] = 0xfe;
  h.checksum = detail::handle_checksum(h);
  auto back = parse_handle(to_string(h));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(std::memcmp(&*back, &h, sizeof h), 0);
}

TEST(ipc_handle, malformed_text_is_invalid_argument) {
  handle h;
  h.magic = handle_magic;
  h.version = handle_version;
  h.bytes = 256;
  h.checksum = detail::handle_checksum(h);
  const std::string good = to_string(h);
  std::string flipped = good;
  flipped[flipped.size() - 20] = flipped[flipped.size() - 20] == '0' ? '1' : '0';  // inside the fields
  std::string bad_hex = good;
  bad_hex[10] = 'z';
  handle wrong_magic = h;
  wrong_magic.magic ^= 1;
  wrong_magic.checksum = detail::handle_checksum(wrong_magic);
  for (const std::string& text :
       {std::string(), std::string("flipc1:"), good.substr(1), good + "00", good.substr(0, good.size() - 2), flipped,
        bad_hex, to_string(wrong_magic), std::string("flipc9:") + good.substr(7)}) {
    auto r = parse_handle(text);
    EXPECT_FALSE(r) << text;
    if (!r) {
      EXPECT_EQ(r.code(), errc::invalid_argument) << r.error().to_string();
    }
  }
}

TEST(ipc_liveness, a_pid_with_another_start_time_is_dead) {
  const auto self = detail::self_identity();
  EXPECT_TRUE(detail::process_alive(self.pid, self.start_time));
  EXPECT_FALSE(detail::process_alive(self.pid, self.start_time + 1));  // a reused pid
  EXPECT_FALSE(detail::process_alive(0, 0));
}

// --- one process -------------------------------------------------------------------------------

TEST_P(ipc, pool_refuses_bad_sizes_and_devices) {
  EXPECT_EQ(pool::create(*dev_, {.device = 0, .bytes = 16}).code(), errc::invalid_argument);
  EXPECT_EQ(pool::create(*dev_, {.device = 1000, .bytes = 1 << 20}).code(), errc::invalid_argument);
  EXPECT_EQ(pool_->allocate(0).code(), errc::invalid_argument);
  EXPECT_EQ(pool_->allocate(std::size_t{2} << 20).code(), errc::out_of_memory);
  int local = 0;
  EXPECT_EQ(pool_->export_handle(&local).code(), errc::invalid_argument);
  EXPECT_EQ(pool_->deallocate(&local).code(), errc::invalid_argument);
}

TEST_P(ipc, bad_handles_are_errors_never_crashes) {
  const handle good = exported();
  auto with = [](handle h, const std::function<void(handle&)>& change) {
    change(h);
    h.checksum = detail::handle_checksum(h);
    return h;
  };
  // Damaged bytes (checksum no longer matches).
  handle damaged = good;
  damaged.offset += 256;
  EXPECT_EQ(open_import(*dev_, damaged).code(), errc::invalid_argument);
  // The other backend's handle.
  EXPECT_EQ(open_import(*dev_, with(good, [&](handle& h) {
              h.backend = static_cast<std::uint8_t>(dev_->kind() == backend_kind::sim ? backend_kind::cuda : backend_kind::sim);
            })).code(),
            errc::invalid_argument);
  // A source process that does not exist, or whose pid was reused.
  EXPECT_EQ(open_import(*dev_, with(good, [](handle& h) { h.source_pid = h.source_ns_pid = 0x3ffffff0; })).code(),
            errc::not_found);
  EXPECT_EQ(open_import(*dev_, with(good, [](handle& h) { h.source_start += 1; })).code(), errc::not_found);
  // A descriptor number that is not open in the source, and one that is not a memfd.
  EXPECT_FALSE(open_import(*dev_, with(good, [](handle& h) { h.registry_fd = 1000000; })));
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  auto not_memfd = open_import(*dev_, with(good, [&](handle& h) { h.registry_fd = devnull; }));
  ::close(devnull);
  EXPECT_EQ(not_memfd.code(), errc::corrupt) << not_memfd.error().to_string();
  // Another pool's registry behind the right descriptor number (a reused descriptor).
  EXPECT_EQ(open_import(*dev_, with(good, [](handle& h) { h.pool_id ^= 1; })).code(), errc::corrupt);
  // A range that is not the allocation the handle names, or an allocation index out of range.
  EXPECT_EQ(open_import(*dev_, with(good, [](handle& h) { h.bytes *= 2; })).code(), errc::invalid_argument);
  EXPECT_EQ(open_import(*dev_, with(good, [](handle& h) { h.allocation = 100000; })).code(), errc::invalid_argument);
  EXPECT_EQ(open_import(*dev_, with(good, [](handle& h) { h.bytes = 0; })).code(), errc::invalid_argument);
  // A freed allocation: its generation moved on.
  auto other = pool_->allocate(4096);
  ASSERT_TRUE(other);
  auto freed = pool_->export_handle(*other);
  ASSERT_TRUE(freed);
  ASSERT_TRUE(pool_->deallocate(*other));
  EXPECT_EQ(open_import(*dev_, *freed).code(), errc::not_found);
  EXPECT_TRUE(holders().empty()) << "a refused import left a slot behind";
}

TEST_P(ipc, export_waits_for_the_ready_event) {
  auto s = dev_->create_stream();
  auto e = dev_->create_event();
  ASSERT_TRUE(s && e);
  ASSERT_TRUE(launch_host_sleep(*dev_, *s, 200ms));
  ASSERT_TRUE(dev_->fill_async(buffer_, 0xab, 4096, *s));
  ASSERT_TRUE(dev_->record_event(*e, *s));
  const auto t0 = clock_type::now();
  auto h = pool_->export_handle(buffer_, *e);
  ASSERT_TRUE(h) << h.error().to_string();
  EXPECT_GE(ms_since(t0), 150);
  std::vector<unsigned char> seen(4096);
  ASSERT_TRUE(to_host(*dev_, seen.data(), buffer_, seen.size()));
  EXPECT_EQ(seen, std::vector<unsigned char>(4096, 0xab)) << "the handle existed before the bytes were written";
  EXPECT_TRUE(dev_->destroy_event(*e));
  EXPECT_TRUE(dev_->destroy_stream(*s));
}

TEST_P(ipc, gated_work_holds_the_stream_until_its_gate_opens) {
  auto s = dev_->create_stream();
  auto e = dev_->create_event();
  ASSERT_TRUE(s && e);
  host_gate gate;
  gate.bound = 600s;  // never reached: the test opens it
  ASSERT_TRUE(launch_host_gate(*dev_, *s, &gate));
  ASSERT_TRUE(dev_->fill_async(buffer_, 0xcd, 4096, *s));
  ASSERT_TRUE(dev_->record_event(*e, *s));
  std::this_thread::sleep_for(50ms);
  std::vector<unsigned char> seen(4096);
  ASSERT_TRUE(to_host(*dev_, seen.data(), buffer_, seen.size()));
  EXPECT_NE(seen[0], 0xcd) << "the work behind a closed gate ran";
  gate.open.store(true);
  ASSERT_TRUE(dev_->synchronize_event(*e));
  ASSERT_TRUE(to_host(*dev_, seen.data(), buffer_, seen.size()));
  EXPECT_EQ(seen, std::vector<unsigned char>(4096, 0xcd));
  EXPECT_EQ(launch_host_gate(*dev_, *s, nullptr).code(), errc::invalid_argument);
  EXPECT_TRUE(dev_->destroy_event(*e));
  EXPECT_TRUE(dev_->destroy_stream(*s));
}

TEST_P(ipc, a_dropped_event_wait_exports_stale_bytes) {
  if (!faults_compiled_in) GTEST_SKIP() << "fault points are compiled out";
  auto s = dev_->create_stream();
  auto e = dev_->create_event();
  ASSERT_TRUE(s && e);
  ASSERT_TRUE(launch_host_sleep(*dev_, *s, 300ms));
  ASSERT_TRUE(dev_->fill_async(buffer_, 0xab, 4096, *s));
  ASSERT_TRUE(dev_->record_event(*e, *s));
  arm("bug/ipc/dropped-event-wait");
  const auto t0 = clock_type::now();
  auto h = pool_->export_handle(buffer_, *e);
  disarm();
  ASSERT_TRUE(h) << h.error().to_string();
  EXPECT_LT(ms_since(t0), 150);
  std::vector<unsigned char> seen(4096);
  ASSERT_TRUE(to_host(*dev_, seen.data(), buffer_, seen.size()));
  EXPECT_EQ(seen[0], pattern(1, 1)[0]) << "the pre-fix export should hand out the old bytes";
  EXPECT_TRUE(dev_->synchronize_stream(*s));
  EXPECT_TRUE(dev_->destroy_event(*e));
  EXPECT_TRUE(dev_->destroy_stream(*s));
}

TEST_P(ipc, close_without_importers_frees_at_once_and_is_idempotent) {
  const auto t0 = clock_type::now();
  EXPECT_TRUE(pool_->close(1s));
  EXPECT_LT(ms_since(t0), 100);
  EXPECT_TRUE(pool_->close(1s));
  EXPECT_EQ(pool_->allocate(256).code(), errc::refused);
  EXPECT_EQ(pool_->export_handle(buffer_).code(), errc::refused);
  pool_.reset();
}

// --- several processes -------------------------------------------------------------------------

TEST_P(ipc, export_import_sees_the_same_bytes_both_ways) {
  const pid_t c = child("verify-write", exported());
  ASSERT_EQ(wait(c), 0) << "the importer saw other bytes, or failed to import";
  std::vector<unsigned char> seen(part_bytes);
  ASSERT_TRUE(to_host(*dev_, seen.data(), static_cast<std::byte*>(buffer_) + child_part, part_bytes));
  EXPECT_EQ(seen, pattern(part_bytes, 2)) << "the importer's writes are not visible to the exporter";
  EXPECT_TRUE(holders().empty());
}

TEST_P(ipc, the_registry_counts_every_importer_until_it_releases) {
  const handle h = exported();
  const pid_t a = child("hold", h);
  const pid_t b = child("hold", h);
  ASSERT_TRUE(wait_until([&] { return holds(a) && holds(b); })) << describe(holders());
  EXPECT_EQ(holders().size(), 2u);
  EXPECT_EQ(pool_->deallocate(buffer_).code(), errc::busy) << "freed under two readers";
  release();
  EXPECT_EQ(wait(a), 0);
  EXPECT_EQ(wait(b), 0);
  EXPECT_TRUE(holders().empty()) << describe(holders());
}

TEST_P(ipc, close_waits_then_times_out_naming_the_holder) {
  const handle h = exported();
  const pid_t c = child("hold", h);
  ASSERT_TRUE(wait_until([&] { return holds(c); }));
  auto t0 = clock_type::now();
  const status s = pool_->close(300ms);
  const auto waited = ms_since(t0);
  EXPECT_EQ(s.code(), errc::timeout) << s.to_string();
  EXPECT_NE(s.message().find("pid "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(std::to_string(holders().empty() ? c : holders()[0].pid)), std::string::npos) << s.message();
  EXPECT_GE(waited, 290);
  EXPECT_LT(waited, 1000);
  EXPECT_EQ(pool_->close(0ms).code(), errc::busy);
  // Closing: no new importer gets in, and nothing was freed under the holder.
  const pid_t late = child("refused", h);
  EXPECT_EQ(wait(late), 0) << "an import was accepted while the pool was closing";
  // The holder lets go: the next close returns soon after, not at its deadline.
  release();
  t0 = clock_type::now();
  EXPECT_TRUE(pool_->close(10s));
  EXPECT_LT(ms_since(t0), 2000);
  EXPECT_EQ(wait(c), 0);
  pool_.reset();
}

TEST_P(ipc, a_dead_importer_is_not_counted) {
  const pid_t c = child("hold", exported());
  ASSERT_TRUE(wait_until([&] { return holds(c); }));
  ASSERT_EQ(::kill(c, SIGKILL), 0);
  // Not reaped yet: a zombie (or an exiting process) holds nothing.
  EXPECT_TRUE(wait_until([&] { return holders().empty(); }, 2s)) << describe(holders());
  EXPECT_EQ(wait(c), 128 + SIGKILL);
  const auto t0 = clock_type::now();
  EXPECT_TRUE(pool_->close(5s));
  EXPECT_LT(ms_since(t0), 200);
  pool_.reset();
}

TEST_P(ipc, a_killed_holder_releases_a_waiting_close) {
  const pid_t c = child("hold", exported());
  ASSERT_TRUE(wait_until([&] { return holds(c); }));
  std::thread killer([c] {
    std::this_thread::sleep_for(200ms);
    ::kill(c, SIGKILL);
  });
  const auto t0 = clock_type::now();
  const status s = pool_->close(5s);
  const auto waited = ms_since(t0);
  killer.join();
  EXPECT_TRUE(s) << s.to_string();
  EXPECT_GE(waited, 150);
  EXPECT_LT(waited, 1500) << "the dead holder was noticed late";
  EXPECT_EQ(wait(c), 128 + SIGKILL);
  pool_.reset();
}

TEST_P(ipc, a_reexported_handle_counts_in_the_exporters_registry) {
  const pid_t b = child("relay", exported());
  // B and the C it started both hold imports of this pool.
  ASSERT_TRUE(wait_until([&] { return holders().size() == 2; })) << describe(holders());
  EXPECT_TRUE(holds(b));
  EXPECT_EQ(pool_->close(100ms).code(), errc::timeout);
  release();
  EXPECT_EQ(wait(b), 0) << "B or C saw other bytes, or C could not import B's handle";
  EXPECT_TRUE(pool_->close(5s));
  pool_.reset();
}

}  // namespace
}  // namespace faultline::core::device::ipc
