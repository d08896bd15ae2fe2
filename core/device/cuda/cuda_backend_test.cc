// Tests for the cuda device backend (DESIGN.md §4.2, §13.2).
//
// Goal: the backend keeps device.h's contract on real CUDA — error values carrying CUDA's own
// names, runtime_unloading counted after cudart's teardown, a context epoch that changes on
// every reset whoever makes it (and the driver facts its one-call path rests on), so that a
// pool never serves memory of a reset context — and faultline binaries start and choose the sim
// on machines with no GPU and no driver. Method: tests that need no GPU (error mapping, the teardown
// tracker, argument checks, the binary's dynamic dependencies, backend selection) run
// everywhere; every GPU test asks first whether a CUDA device answers and skips with the reason
// when none does. Exit-time and crash facts run in death-test children (a re-exec of this
// binary), never in a fork of a process whose runtime is initialised.
#include <elf.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/status.h"

#if FAULTLINE_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>

#include "core/alloc/device_resource.h"
#include "core/alloc/pool_resource.h"
#include "core/device/cuda/detail/cuda_status.h"
#include "core/device/cuda/detail/driver_api.h"
#endif

namespace faultline::core::device {
namespace {

using ::testing::HasSubstr;

// --- everywhere -----------------------------------------------------------------------------

// DT_NEEDED entries of an ELF64 file, read from its section headers.
std::vector<std::string> needed_libraries(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> needed;
  if (file.size() < sizeof(Elf64_Ehdr) || std::memcmp(file.data(), ELFMAG, SELFMAG) != 0) return needed;
  Elf64_Ehdr header;
  std::memcpy(&header, file.data(), sizeof header);
  auto section = [&](std::size_t i) {
    Elf64_Shdr s;
    std::memcpy(&s, file.data() + header.e_shoff + i * header.e_shentsize, sizeof s);
    return s;
  };
  for (std::size_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr dynamic = section(i);
    if (dynamic.sh_type != SHT_DYNAMIC) continue;
    Elf64_Shdr strings = section(dynamic.sh_link);
    for (std::size_t off = 0; off + sizeof(Elf64_Dyn) <= dynamic.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn entry;
      std::memcpy(&entry, file.data() + dynamic.sh_offset + off, sizeof entry);
      if (entry.d_tag == DT_NULL) break;
      if (entry.d_tag == DT_NEEDED) needed.emplace_back(file.data() + strings.sh_offset + entry.d_un.d_val);
    }
  }
  return needed;
}

TEST(cuda_backend, binary_needs_neither_the_driver_nor_nvml_nor_shared_cudart) {
  std::vector<std::string> needed = needed_libraries("/proc/self/exe");
  ASSERT_FALSE(needed.empty()) << "could not read the dynamic section of /proc/self/exe";
  for (const std::string& lib : needed) {
    EXPECT_EQ(lib.find("libcuda.so"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("libnvidia-ml.so"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("libcudart.so"), std::string::npos) << lib;
  }
}

bool cuda_device_answers() {
  auto c = cuda();
  if (!c) return false;
  auto n = (*c)->device_count();
  return n && *n > 0;
}

[[noreturn]] void print_selection_and_exit(const char* value) {
  ::setenv("FAULTLINE_DEVICE", value, 1);
  auto chosen = select_backend();
  if (chosen) {
    std::fprintf(stderr, "selected=%s\n", (*chosen)->kind() == backend_kind::sim ? "sim" : "cuda");
  } else {
    std::fprintf(stderr, "error=%s\n", chosen.error().to_string().c_str());
  }
  std::exit(0);
}

TEST(device_selection, auto_picks_cuda_only_when_a_device_answers) {
  const char* expected = cuda_device_answers() ? "selected=cuda" : "selected=sim";
  EXPECT_EXIT(print_selection_and_exit("auto"), ::testing::ExitedWithCode(0), expected);
}

TEST(device_selection, explicit_cuda_without_a_device_is_unavailable) {
  const char* expected = cuda_device_answers() ? "selected=cuda" : "error=unavailable: ";
  EXPECT_EXIT(print_selection_and_exit("cuda"), ::testing::ExitedWithCode(0), expected);
}

#if !FAULTLINE_HAVE_CUDA

TEST(cuda_backend, is_unavailable_when_built_without_the_toolkit) {
  auto c = cuda();
  ASSERT_FALSE(c);
  EXPECT_EQ(c.code(), errc::unavailable);
  EXPECT_THAT(c.error().message(), HasSubstr("built without the CUDA toolkit"));
}

#else  // FAULTLINE_HAVE_CUDA

backend& cuda_backend_ref() {
  auto c = cuda();
  if (!c) {
    std::fprintf(stderr, "cuda(): %s\n", c.error().to_string().c_str());
    std::abort();
  }
  return **c;
}

// --- error mapping and the teardown tracker (no GPU) ----------------------------------------

TEST(cuda_errors, allocation_failure_is_out_of_memory_with_cuda_name_and_text) {
  status s = detail::from_cuda(cudaErrorMemoryAllocation, "cudaMalloc of 64 bytes");
  EXPECT_EQ(s.code(), errc::out_of_memory);
  EXPECT_THAT(s.message(), HasSubstr("cudaMalloc of 64 bytes: cudaErrorMemoryAllocation ("));
  EXPECT_THAT(s.message(), HasSubstr(cudaGetErrorString(cudaErrorMemoryAllocation)));
}

TEST(cuda_errors, each_runtime_error_class_maps_to_its_code) {
  struct row {
    cudaError_t err;
    errc code;
  };
  for (row r : {row{cudaSuccess, errc::ok}, row{cudaErrorCudartUnloading, errc::runtime_unloading},
                row{cudaErrorNotReady, errc::not_ready}, row{cudaErrorInvalidValue, errc::invalid_argument},
                row{cudaErrorInvalidDevice, errc::invalid_argument},
                row{cudaErrorInvalidResourceHandle, errc::invalid_argument},
                row{cudaErrorContextIsDestroyed, errc::context_reset},
                row{cudaErrorDeviceUninitialized, errc::context_reset}, row{cudaErrorNoDevice, errc::unavailable},
                row{cudaErrorInsufficientDriver, errc::unavailable}, row{cudaErrorIllegalAddress, errc::internal},
                row{cudaErrorUnknown, errc::internal}}) {
    EXPECT_EQ(detail::code_for(r.err), r.code) << cudaGetErrorName(r.err);
    if (r.err != cudaSuccess) {
      status s = detail::from_cuda(r.err, "op");
      EXPECT_EQ(s.code(), r.code);
      EXPECT_THAT(s.message(), HasSubstr(cudaGetErrorName(r.err)));
    }
  }
  EXPECT_TRUE(detail::from_cuda(cudaSuccess, "op").is_ok());
}

TEST(cuda_errors, driver_errors_carry_their_name_and_deinitialized_means_unloading) {
  status s = detail::from_driver(CUDA_ERROR_CONTEXT_IS_DESTROYED, "cuEventSynchronize",
                                 "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed");
  EXPECT_EQ(s.code(), errc::context_reset);
  EXPECT_EQ(s.message(), "cuEventSynchronize: CUDA_ERROR_CONTEXT_IS_DESTROYED (context is destroyed)");
  EXPECT_EQ(detail::code_for_driver(CUDA_ERROR_DEINITIALIZED), errc::runtime_unloading);
  EXPECT_EQ(detail::code_for_driver(CUDA_ERROR_OUT_OF_MEMORY), errc::out_of_memory);
  status unnamed = detail::from_driver(CUDA_ERROR_UNKNOWN, "cuX", nullptr, nullptr);
  EXPECT_EQ(unnamed.code(), errc::internal);
  EXPECT_THAT(unnamed.message(), HasSubstr("CUresult 999"));
}

TEST(runtime_tracker, unloading_marks_torn_down_and_counts_every_such_return) {
  detail::runtime_tracker rt;
  EXPECT_EQ(rt.state(), runtime_state::uninitialized);
  rt.mark_running();
  EXPECT_EQ(rt.state(), runtime_state::running);
  EXPECT_TRUE(rt.check(cudaSuccess, "cudaFree").is_ok());
  EXPECT_EQ(rt.check(cudaErrorMemoryAllocation, "cudaMalloc").code(), errc::out_of_memory);
  EXPECT_EQ(rt.calls_after_teardown(), 0u);
  EXPECT_EQ(rt.state(), runtime_state::running);

  status s = rt.check(cudaErrorCudartUnloading, "cudaEventDestroy");
  EXPECT_EQ(s.code(), errc::runtime_unloading);
  EXPECT_THAT(s.message(), HasSubstr("cudaEventDestroy: cudaErrorCudartUnloading"));
  EXPECT_EQ(rt.state(), runtime_state::torn_down);
  EXPECT_EQ(rt.calls_after_teardown(), 1u);
  EXPECT_EQ(rt.unloading("cudaFree").code(), errc::runtime_unloading);
  EXPECT_EQ(rt.fail(cudaErrorCudartUnloading, "cudaFree").code(), errc::runtime_unloading);
  EXPECT_EQ(rt.calls_after_teardown(), 3u);
  rt.mark_running();  // teardown is final
  EXPECT_EQ(rt.state(), runtime_state::torn_down);
}

// --- the real backend, with or without a GPU ------------------------------------------------

TEST(cuda_backend, answers_device_count_with_a_value_or_an_error_never_a_crash) {
  backend& b = cuda_backend_ref();
  EXPECT_EQ(b.kind(), backend_kind::cuda);
  EXPECT_EQ(b.name(), "cuda");
  auto n = b.device_count();
  if (n) {
    EXPECT_GE(*n, 0);
  } else {
    // Here: no driver. The message names CUDA's own error.
    EXPECT_EQ(n.code(), errc::unavailable) << n.error().to_string();
    EXPECT_THAT(n.error().message(), HasSubstr("cudaGetDeviceCount: cudaError"));
    EXPECT_EQ(b.context_epoch(0), 0u);  // no driver: no context can exist
    EXPECT_EQ(b.reset_context(0).code(), errc::unavailable);
  }
  EXPECT_EQ(b.state(), runtime_state::running);
  EXPECT_EQ(b.calls_after_teardown(), 0u);
}

TEST(cuda_backend, rejects_bad_arguments_with_invalid_argument) {
  backend& b = cuda_backend_ref();
  int x = 0;
  EXPECT_EQ(b.allocate(0).code(), errc::invalid_argument);
  EXPECT_EQ(b.allocate_async(0, stream{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.copy_async(nullptr, &x, sizeof x, stream{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.copy_async(&x, nullptr, sizeof x, stream{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.fill_async(nullptr, 0, 4, stream{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.destroy_stream(stream{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.destroy_event(event{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.record_event(event{}, stream{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.query_event(event{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.synchronize_event(event{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.stream_wait_event(stream{}, event{}).code(), errc::invalid_argument);
  EXPECT_EQ(b.set_device(-1).code(), errc::invalid_argument);
  EXPECT_EQ(b.memory(-1).code(), errc::invalid_argument);
  EXPECT_EQ(b.utilization(-1).code(), errc::invalid_argument);
  EXPECT_EQ(b.reset_context(-1).code(), errc::invalid_argument);
  EXPECT_EQ(b.context_epoch(-1), 0u);
  EXPECT_TRUE(b.deallocate(nullptr).is_ok());
  EXPECT_TRUE(b.deallocate_async(nullptr, stream{}).is_ok());
  EXPECT_TRUE(b.copy_async(nullptr, nullptr, 0, stream{}).is_ok());  // nothing to copy
  EXPECT_EQ(b.calls_after_teardown(), 0u);
}

// A fresh process: the backend has made no runtime call yet.
[[noreturn]] void check_lazy_state_and_exit() {
  backend& b = cuda_backend_ref();
  bool ok = b.state() == runtime_state::uninitialized;
  (void)b.allocate(0);          // rejected before the runtime
  (void)b.deallocate(nullptr);  // no device call
  ok = ok && b.state() == runtime_state::uninitialized;
  (void)b.device_count();
  ok = ok && b.state() == runtime_state::running && b.calls_after_teardown() == 0;
  std::fprintf(stderr, "lazy_state=%s\n", ok ? "ok" : "wrong");
  std::exit(0);
}

TEST(cuda_backend, state_is_uninitialized_until_the_first_device_call) {
  EXPECT_EXIT(check_lazy_state_and_exit(), ::testing::ExitedWithCode(0), "lazy_state=ok");
}

// --- GPU tests ------------------------------------------------------------------------------

class cuda_gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    b_ = &cuda_backend_ref();
    auto n = b_->device_count();
    if (!n) GTEST_SKIP() << "no CUDA device answers: " << n.error().to_string();
    if (*n == 0) GTEST_SKIP() << "no CUDA device answers: cudaGetDeviceCount found 0 devices";
    ASSERT_TRUE(b_->set_device(0)) << b_->set_device(0).to_string();
  }
  backend& dev() { return *b_; }

 private:
  backend* b_ = nullptr;
};

// Holds a stream's work behind a host function until open() (bounded, so a failing test
// cannot wedge the stream forever); the destructor opens and drains the stream.
class stream_gate {
 public:
  stream_gate(backend& b, stream s) : b_(b), s_(s) {
    launched_ = cudaLaunchHostFunc(static_cast<cudaStream_t>(s.native), &stream_gate::wait, this) == cudaSuccess;
  }
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;
  ~stream_gate() {
    open();
    (void)b_.synchronize_stream(s_);
  }
  [[nodiscard]] bool launched() const { return launched_; }
  void open() {
    std::lock_guard<std::mutex> lock(m_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  static void wait(void* self) {
    auto* g = static_cast<stream_gate*>(self);
    std::unique_lock<std::mutex> lock(g->m_);
    g->cv_.wait_for(lock, std::chrono::seconds(30), [g] { return g->open_; });
  }
  backend& b_;
  stream s_;
  bool launched_ = false;
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST_F(cuda_gpu, allocates_and_frees_device_memory) {
  auto a = dev().allocate(1 << 20);
  auto b = dev().allocate(1 << 20);
  ASSERT_TRUE(a) << a.error().to_string();
  ASSERT_TRUE(b) << b.error().to_string();
  EXPECT_NE(*a, nullptr);
  EXPECT_NE(*a, *b);
  EXPECT_TRUE(dev().deallocate(*a));
  EXPECT_TRUE(dev().deallocate(*b));

  auto huge = dev().allocate(std::size_t{1} << 50);  // a petabyte: no device has it
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.code(), errc::out_of_memory);
  EXPECT_THAT(huge.error().message(), HasSubstr("cudaErrorMemoryAllocation"));
}

TEST_F(cuda_gpu, allocates_and_frees_in_stream_order) {
  auto s = dev().create_stream();
  ASSERT_TRUE(s) << s.error().to_string();
  auto p = dev().allocate_async(1 << 20, *s);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_TRUE(dev().fill_async(*p, 0x3c, 1 << 20, *s));
  unsigned char back = 0;
  EXPECT_TRUE(dev().copy_async(&back, static_cast<unsigned char*>(*p) + 12345, 1, *s));
  EXPECT_TRUE(dev().deallocate_async(*p, *s));
  EXPECT_TRUE(dev().synchronize_stream(*s));
  EXPECT_EQ(back, 0x3c);
  EXPECT_TRUE(dev().destroy_stream(*s));
}

TEST_F(cuda_gpu, copies_host_to_device_to_host_round_trip) {
  constexpr std::size_t n = 1 << 16;
  std::vector<unsigned char> in(n), out(n, 0);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>((i * 131 + 7) & 0xff);
  auto s = dev().create_stream();
  ASSERT_TRUE(s);
  auto d = dev().allocate(n);
  ASSERT_TRUE(d);
  EXPECT_TRUE(dev().copy_async(*d, in.data(), n, *s));
  EXPECT_TRUE(dev().fill_async(static_cast<unsigned char*>(*d) + n / 2, 0x5a, n / 2, *s));
  EXPECT_TRUE(dev().copy_async(out.data(), *d, n, *s));
  EXPECT_TRUE(dev().synchronize_stream(*s));
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[i], i < n / 2 ? in[i] : 0x5a) << "byte " << i;
  }
  EXPECT_TRUE(dev().deallocate(*d));
  EXPECT_TRUE(dev().destroy_stream(*s));
}

TEST_F(cuda_gpu, event_query_is_not_ready_until_captured_work_completes) {
  auto s = dev().create_stream();
  auto e = dev().create_event();
  ASSERT_TRUE(s);
  ASSERT_TRUE(e);
  {
    stream_gate gate(dev(), *s);
    ASSERT_TRUE(gate.launched());
    ASSERT_TRUE(dev().record_event(*e, *s));
    status q = dev().query_event(*e);
    EXPECT_EQ(q.code(), errc::not_ready) << q.to_string();
    gate.open();
    EXPECT_TRUE(dev().synchronize_event(*e));
    EXPECT_TRUE(dev().query_event(*e));
  }
  EXPECT_TRUE(dev().destroy_event(*e));
  EXPECT_TRUE(dev().destroy_stream(*s));
}

TEST_F(cuda_gpu, stream_wait_event_orders_work_across_streams) {
  auto producer = dev().create_stream();
  auto consumer = dev().create_stream();
  auto produced = dev().create_event();
  auto consumed = dev().create_event();
  ASSERT_TRUE(producer && consumer && produced && consumed);
  constexpr std::size_t n = 4096;
  auto src = dev().allocate(n);
  auto dst = dev().allocate(n);
  ASSERT_TRUE(src && dst);
  ASSERT_TRUE(dev().fill_async(*src, 0x11, n, *producer));
  ASSERT_TRUE(dev().fill_async(*dst, 0x00, n, *producer));
  ASSERT_TRUE(dev().synchronize_stream(*producer));
  {
    stream_gate gate(dev(), *producer);
    ASSERT_TRUE(gate.launched());
    ASSERT_TRUE(dev().fill_async(*src, 0x77, n, *producer));  // held behind the gate
    ASSERT_TRUE(dev().record_event(*produced, *producer));
    ASSERT_TRUE(dev().stream_wait_event(*consumer, *produced));
    // Device to device: a copy into pageable host memory would block this thread until the
    // gate opens, which is not what is being tested.
    ASSERT_TRUE(dev().copy_async(*dst, *src, n, *consumer));
    ASSERT_TRUE(dev().record_event(*consumed, *consumer));
    EXPECT_EQ(dev().query_event(*consumed).code(), errc::not_ready) << "the consumer ran ahead of the wait";
    gate.open();
    EXPECT_TRUE(dev().synchronize_stream(*consumer));
  }
  std::array<unsigned char, n> host{};
  ASSERT_TRUE(dev().copy_async(host.data(), *dst, n, *consumer));
  ASSERT_TRUE(dev().synchronize_stream(*consumer));
  for (unsigned char c : host) ASSERT_EQ(c, 0x77);  // the copy saw the producer's gated fill
  EXPECT_TRUE(dev().deallocate(*src));
  EXPECT_TRUE(dev().deallocate(*dst));
  for (event e : {*produced, *consumed}) EXPECT_TRUE(dev().destroy_event(e));
  for (stream s : {*producer, *consumer}) EXPECT_TRUE(dev().destroy_stream(s));
}

TEST_F(cuda_gpu, memory_reports_the_device_and_sees_an_allocation) {
  auto before = dev().memory(0);
  ASSERT_TRUE(before) << before.error().to_string();
  EXPECT_GT(before->bytes_total, 0u);
  EXPECT_LE(before->bytes_free, before->bytes_total);
  constexpr std::size_t bytes = std::size_t{512} << 20;
  // Other processes may allocate or free meanwhile: look for the drop over a few tries.
  bool seen = false;
  for (int attempt = 0; attempt < 5 && !seen; ++attempt) {
    auto free_before = dev().memory(0);
    auto p = dev().allocate(bytes);
    ASSERT_TRUE(p) << p.error().to_string();
    auto free_after = dev().memory(0);
    ASSERT_TRUE(free_before && free_after);
    seen = free_before->bytes_free >= free_after->bytes_free + bytes / 2;
    EXPECT_TRUE(dev().deallocate(*p));
  }
  EXPECT_TRUE(seen) << "free memory never dropped by half of a " << bytes << "-byte allocation";
  auto current = dev().current_device();
  ASSERT_TRUE(current);
  EXPECT_EQ(*current, 0);
  EXPECT_EQ(dev().memory(1 << 20).code(), errc::invalid_argument);
}

TEST_F(cuda_gpu, utilization_is_a_percentage_or_unavailable_without_nvml) {
  auto u = dev().utilization(0);
  if (u) {
    EXPECT_GE(*u, 0);
    EXPECT_LE(*u, 100);
  } else {
    EXPECT_EQ(u.code(), errc::unavailable) << u.error().to_string();
    EXPECT_THAT(u.error().message(), HasSubstr("NVML"));
  }
}

TEST_F(cuda_gpu, own_reset_changes_the_epoch_and_new_allocations_work) {
  auto old = dev().allocate(1 << 20);  // makes the context exist; stale after the reset
  ASSERT_TRUE(old);
  const std::uint64_t e0 = dev().context_epoch(0);
  EXPECT_NE(e0, 0u);
  EXPECT_EQ(dev().context_epoch(0), e0) << "the epoch moved without a reset";
  ASSERT_TRUE(dev().reset_context(0));
  const std::uint64_t e1 = dev().context_epoch(0);
  EXPECT_NE(e1, e0);
  // `old` belongs to the destroyed context: never touched again.
  auto fresh = dev().allocate(1 << 20);
  ASSERT_TRUE(fresh) << fresh.error().to_string();
  int v = 0x12345678, back = 0;
  EXPECT_TRUE(dev().copy_async(*fresh, &v, sizeof v, stream{}));
  EXPECT_TRUE(dev().copy_async(&back, *fresh, sizeof back, stream{}));
  EXPECT_TRUE(dev().synchronize_stream(stream{}));
  EXPECT_EQ(back, v);
  const std::uint64_t e2 = dev().context_epoch(0);
  EXPECT_NE(e2, e0);
  EXPECT_NE(e2, e1);
  EXPECT_TRUE(dev().deallocate(*fresh));
}

detail::driver_api driver_or_die() {
  cudaError_t err = cudaSuccess;
  auto drv = detail::load_driver_api(err);
  if (!drv) {
    std::fprintf(stderr, "driver entry points: %s\n", drv.error().to_string().c_str());
    std::abort();
  }
  return *drv;
}

TEST_F(cuda_gpu, a_reset_made_directly_through_the_driver_changes_the_epoch) {
  ASSERT_TRUE(dev().synchronize_device());  // the context exists
  const std::uint64_t e0 = dev().context_epoch(0);
  detail::driver_api drv = driver_or_die();
  CUdevice d = 0;
  ASSERT_EQ(drv.device_get(&d, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.primary_ctx_reset(d), CUDA_SUCCESS);  // behind the backend's back
  const std::uint64_t e1 = dev().context_epoch(0);
  EXPECT_NE(e1, e0);
  auto p = dev().allocate(4096);  // the runtime recreates the context
  ASSERT_TRUE(p) << p.error().to_string();
  const std::uint64_t e2 = dev().context_epoch(0);
  EXPECT_NE(e2, e0);
  EXPECT_NE(e2, e1);
  ASSERT_EQ(drv.primary_ctx_reset(d), CUDA_SUCCESS);  // and again, now from an active context
  EXPECT_NE(dev().context_epoch(0), e2);
  EXPECT_TRUE(dev().synchronize_device());
}

TEST_F(cuda_gpu, context_epoch_never_creates_a_context) {
  // The epoch has been read with the context active, so the backend holds its handle and the
  // queries below take the one-call path first.
  ASSERT_TRUE(dev().synchronize_device());
  EXPECT_NE(dev().context_epoch(0), 0u);
  ASSERT_TRUE(dev().reset_context(0));
  detail::driver_api drv = driver_or_die();
  CUdevice d = 0;
  ASSERT_EQ(drv.device_get(&d, 0), CUDA_SUCCESS);
  for (int i = 0; i < 100; ++i) (void)dev().context_epoch(0);
  unsigned int flags = 0;
  int active = -1;
  ASSERT_EQ(drv.primary_ctx_get_state(d, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0) << "context_epoch() created the primary context";
  ASSERT_TRUE(dev().reset_context(0));  // a reset with no context still moves the epoch
  const std::uint64_t e = dev().context_epoch(0);
  ASSERT_TRUE(dev().reset_context(0));
  EXPECT_NE(dev().context_epoch(0), e);
  EXPECT_TRUE(dev().synchronize_device());
}

// context_epoch()'s one-call path rests on two driver facts, pinned here so that a driver that
// changes either fails this test rather than the early-reset guarantee: the primary context's
// handle stays the same object across a reset (so keeping it never dangles), and cuCtxGetId on
// it answers an error while the context is destroyed (creating nothing) and the new context's
// id once it is recreated.
TEST_F(cuda_gpu, the_primary_context_handle_outlives_a_reset_and_names_each_new_context) {
  ASSERT_TRUE(dev().synchronize_device());  // the context exists
  detail::driver_api drv = driver_or_die();
  CUdevice d = 0;
  ASSERT_EQ(drv.device_get(&d, 0), CUDA_SUCCESS);
  CUcontext before = nullptr;
  ASSERT_EQ(drv.primary_ctx_retain(&before, d), CUDA_SUCCESS);
  ASSERT_EQ(drv.primary_ctx_release(d), CUDA_SUCCESS);
  unsigned long long id_before = 0;
  ASSERT_EQ(drv.ctx_get_id(before, &id_before), CUDA_SUCCESS);

  ASSERT_EQ(drv.primary_ctx_reset(d), CUDA_SUCCESS);
  unsigned long long id_destroyed = 0;
  const CUresult destroyed = drv.ctx_get_id(before, &id_destroyed);
  const char* name = nullptr;
  drv.get_error_name(destroyed, &name);
  std::fprintf(stderr, "cuCtxGetId of a destroyed primary context: %s (%d), id %llu (was %llu)\n",
               name ? name : "?", static_cast<int>(destroyed), id_destroyed, id_before);
  EXPECT_NE(destroyed, CUDA_SUCCESS) << "a destroyed context still answers its id " << id_destroyed;
  unsigned int flags = 0;
  int active = -1;
  ASSERT_EQ(drv.primary_ctx_get_state(d, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0) << "cuCtxGetId recreated the primary context";

  ASSERT_TRUE(dev().synchronize_device());  // the runtime recreates the context
  CUcontext after = nullptr;
  ASSERT_EQ(drv.primary_ctx_retain(&after, d), CUDA_SUCCESS);
  ASSERT_EQ(drv.primary_ctx_release(d), CUDA_SUCCESS);
  std::fprintf(stderr, "primary context handle before the reset %p, after %p\n", static_cast<void*>(before),
               static_cast<void*>(after));
  EXPECT_EQ(after, before) << "the primary context came back as another object";
  unsigned long long id_after = 0;
  ASSERT_EQ(drv.ctx_get_id(before, &id_after), CUDA_SUCCESS);
  EXPECT_GT(id_after, id_before);
}

// The early-reset guarantee end to end on the GPU: a reset made behind the backend's back
// between two pool allocations, after the backend has learnt the context's handle, is seen by
// the second allocation, which comes from a new upstream block of the new context.
TEST_F(cuda_gpu, a_pool_never_serves_memory_of_a_context_reset_through_the_driver) {
  alloc::device_resource upstream(dev());
  alloc::pool_options options;
  options.backend = &dev();
  options.device = 0;
  options.initial_size_bytes = std::size_t{1} << 20;
  alloc::pool_resource pool(upstream, options);
  auto first = pool.allocate(4096);
  ASSERT_TRUE(first) << first.error().to_string();
  ASSERT_EQ(pool.statistics().upstream_allocations, 1u);

  detail::driver_api drv = driver_or_die();
  CUdevice d = 0;
  ASSERT_EQ(drv.device_get(&d, 0), CUDA_SUCCESS);
  ASSERT_EQ(drv.primary_ctx_reset(d), CUDA_SUCCESS);

  auto second = pool.allocate(4096);
  ASSERT_TRUE(second) << second.error().to_string();
  alloc::pool_statistics stats = pool.statistics();
  EXPECT_EQ(stats.context_resets_seen, 1u);
  EXPECT_EQ(stats.bytes_leaked_on_reset, std::size_t{1} << 20);
  EXPECT_EQ(stats.upstream_allocations, 2u) << "the second allocation was carved from the old context's block";
  EXPECT_EQ(stats.upstream_blocks, 1u);
  int v = 0x5eed, back = 0;
  EXPECT_TRUE(dev().copy_async(*second, &v, sizeof v, stream{}));
  EXPECT_TRUE(dev().copy_async(&back, *second, sizeof back, stream{}));
  EXPECT_TRUE(dev().synchronize_stream(stream{}));
  EXPECT_EQ(back, v);
  // The new context may map the same address again; the address then names the new block.
  if (*first != *second) {
    EXPECT_TRUE(pool.deallocate(*first, 4096));  // memory of the destroyed context: dropped
    EXPECT_EQ(pool.statistics().stale_deallocations, 1u);
  }
  EXPECT_TRUE(pool.deallocate(*second, 4096));
  EXPECT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
}

CUresult current_context(CUcontext* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, detail::driver_api_version, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return CUDA_ERROR_NOT_FOUND;
  }
  return reinterpret_cast<CUresult (*)(CUcontext*)>(fn)(out);
}

// The epoch depends on no thread's current context: a thread that has never made a runtime
// call (no current context) sees a reset made before it started, makes one itself and sees it,
// and its queries leave it without a current context.
TEST_F(cuda_gpu, a_reset_is_seen_from_a_thread_with_no_current_context) {
  alloc::device_resource upstream(dev());
  alloc::pool_options options;
  options.backend = &dev();
  options.device = 0;
  options.initial_size_bytes = std::size_t{1} << 20;
  alloc::pool_resource pool(upstream, options);
  auto kept = pool.allocate(4096);
  ASSERT_TRUE(kept) << kept.error().to_string();
  const std::uint64_t e0 = dev().context_epoch(0);
  detail::driver_api drv = driver_or_die();
  CUdevice d = 0;
  ASSERT_EQ(drv.device_get(&d, 0), CUDA_SUCCESS);

  ASSERT_EQ(drv.primary_ctx_reset(d), CUDA_SUCCESS);  // happens-before the thread's queries
  std::uint64_t seen_by_thread = 0, after_own_reset = 0;
  CUresult current_before = CUDA_ERROR_UNKNOWN, current_after = CUDA_ERROR_UNKNOWN, reset = CUDA_ERROR_UNKNOWN;
  CUcontext ctx_before = reinterpret_cast<CUcontext>(1), ctx_after = reinterpret_cast<CUcontext>(1);
  std::thread([&] {
    current_before = current_context(&ctx_before);
    seen_by_thread = dev().context_epoch(0);
    reset = drv.primary_ctx_reset(d);  // a second reset, from a thread with no current context
    after_own_reset = dev().context_epoch(0);
    current_after = current_context(&ctx_after);
  }).join();
  ASSERT_EQ(current_before, CUDA_SUCCESS);
  EXPECT_EQ(ctx_before, nullptr) << "the new thread already had a current context";
  EXPECT_NE(seen_by_thread, e0);
  ASSERT_EQ(reset, CUDA_SUCCESS);
  ASSERT_EQ(current_after, CUDA_SUCCESS);
  EXPECT_EQ(ctx_after, nullptr) << "context_epoch() made a context current";
  EXPECT_EQ(after_own_reset, seen_by_thread) << "a reset of no context destroys nothing and is not the backend's";

  // Recreated from another fresh thread by the pool's own growth: the pool drops the old block.
  result<void*> fresh = status(errc::internal, "not run");
  std::thread([&] { fresh = pool.allocate(4096); }).join();
  ASSERT_TRUE(fresh) << fresh.error().to_string();
  const std::uint64_t e1 = dev().context_epoch(0);
  EXPECT_NE(e1, e0);
  EXPECT_NE(e1, seen_by_thread);
  EXPECT_EQ(pool.statistics().context_resets_seen, 1u);
  EXPECT_EQ(pool.statistics().upstream_allocations, 2u);
  if (*kept != *fresh) {
    EXPECT_TRUE(pool.deallocate(*kept, 4096));  // as in the test above
  }
  EXPECT_TRUE(pool.deallocate(*fresh, 4096));
  EXPECT_TRUE(pool.check_invariants()) << pool.check_invariants().to_string();
}

// DESIGN.md §13.2, refined by measurement on driver 580: cuEventSynchronize on an event whose
// primary context was reset answers CUDA_ERROR_CONTEXT_IS_DESTROYED while no new context
// exists; it is SIGSEGV once the context has been recreated (next test).
TEST_F(cuda_gpu, event_synchronize_right_after_a_reset_reports_a_destroyed_context) {
  auto e = dev().create_event();
  ASSERT_TRUE(e);
  ASSERT_TRUE(dev().record_event(*e, stream{}));
  ASSERT_TRUE(dev().synchronize_event(*e));
  ASSERT_TRUE(dev().reset_context(0));
  detail::driver_api drv = driver_or_die();
  EXPECT_EQ(drv.event_synchronize(static_cast<CUevent>(e->native)), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(dev().synchronize_event(*e).code(), errc::context_reset);
  // The event is stale: leaked, never destroyed. Recreate the context for later tests.
  EXPECT_TRUE(dev().synchronize_device());
}

[[noreturn]] void synchronize_event_of_a_recreated_context() {
  backend& b = cuda_backend_ref();
  auto e = b.create_event();
  if (!e || !b.record_event(*e, stream{}) || !b.synchronize_event(*e) || !b.reset_context(0)) std::_Exit(3);
  if (!b.allocate(1 << 20)) std::_Exit(4);  // the runtime recreates the primary context
  CUresult r = driver_or_die().event_synchronize(static_cast<CUevent>(e->native));
  std::fprintf(stderr, "cuEventSynchronize returned %d\n", static_cast<int>(r));
  std::_Exit(0);
}

TEST_F(cuda_gpu, event_synchronize_after_reset_and_recreation_is_sigsegv) {
  EXPECT_EXIT(synchronize_event_of_a_recreated_context(), ::testing::KilledBySignal(SIGSEGV), "");
}

// The teardown program of DESIGN.md §13.2, through the backend. Order matters and is why this
// runs in its own process: the report hook is registered with atexit and the static holder is
// constructed before the first CUDA call (whose cuInit registers CUDA's teardown), so both run
// after the teardown (atexit is LIFO).
struct event_holder {
  event e;
  ~event_holder() {
    if (!e) return;
    backend& b = cuda_backend_ref();
    (void)b.synchronize_event(e);
    (void)b.destroy_event(e);
  }
};

event_holder& static_event_holder() {
  static event_holder holder;
  return holder;
}

void report_teardown_calls() {
  backend& b = cuda_backend_ref();
  const char* state = b.state() == runtime_state::torn_down ? "torn_down"
                      : b.state() == runtime_state::running ? "running"
                                                            : "uninitialized";
  std::fprintf(stderr, "calls_after_teardown=%llu state=%s\n",
               static_cast<unsigned long long>(b.calls_after_teardown()), state);
}

[[noreturn]] void exit_with_an_event_in_a_static() {
  std::atexit(report_teardown_calls);
  static_event_holder();
  backend& b = cuda_backend_ref();
  if (b.state() != runtime_state::uninitialized) std::_Exit(3);
  auto e = b.create_event();  // cudart initialises here
  if (!e || !b.record_event(*e, stream{})) std::_Exit(4);
  static_event_holder().e = *e;
  std::exit(0);
}

TEST(cuda_gpu_exit, calls_after_teardown_are_counted_and_exit_is_clean) {
  // The death-test child re-runs this body before the statement, and any CUDA call made there
  // (even cuInit through the driver) registers the teardown ahead of the report hook and the
  // holder: measured, the holder's calls then succeed and nothing is counted. So only the
  // parent asks whether a device answers; the child goes straight to the program.
  if (GTEST_FLAG_GET(internal_run_death_test).empty()) {
    auto n = cuda_backend_ref().device_count();
    if (!n) GTEST_SKIP() << "no CUDA device answers: " << n.error().to_string();
    if (*n == 0) GTEST_SKIP() << "no CUDA device answers: cudaGetDeviceCount found 0 devices";
  }
  EXPECT_EXIT(exit_with_an_event_in_a_static(), ::testing::ExitedWithCode(0),
              "calls_after_teardown=[1-9][0-9]* state=torn_down");
}

// The epoch after teardown: the backend has learnt the primary context's handle, and the
// first query after CUDA's exit teardown (registered at cuInit, so it runs before this hook)
// must neither crash on that handle nor move the epoch; it answers the last one and marks the
// runtime torn down. Its own process, for the same ordering reasons as the test above.
std::uint64_t epoch_before_exit = 0;

void report_epoch_after_teardown() {
  backend& b = cuda_backend_ref();
  const std::uint64_t e = b.context_epoch(0);
  const std::uint64_t again = b.context_epoch(0);
  const char* state = b.state() == runtime_state::torn_down ? "torn_down"
                      : b.state() == runtime_state::running ? "running"
                                                            : "uninitialized";
  std::fprintf(stderr, "epoch_after_teardown=%s state=%s calls_after_teardown=%llu\n",
               e == epoch_before_exit && again == e ? "last" : "moved", state,
               static_cast<unsigned long long>(b.calls_after_teardown()));
}

[[noreturn]] void exit_after_reading_the_epoch() {
  std::atexit(report_epoch_after_teardown);
  backend& b = cuda_backend_ref();
  if (b.state() != runtime_state::uninitialized) std::_Exit(3);
  if (!b.allocate(1 << 20)) std::_Exit(4);  // cudart initialises here; the context is active
  epoch_before_exit = b.context_epoch(0);  // the backend now holds the context's handle
  if (epoch_before_exit == 0 || b.context_epoch(0) != epoch_before_exit) std::_Exit(5);
  std::exit(0);
}

TEST(cuda_gpu_exit, context_epoch_after_teardown_answers_the_last_epoch) {
  if (GTEST_FLAG_GET(internal_run_death_test).empty()) {
    auto n = cuda_backend_ref().device_count();
    if (!n) GTEST_SKIP() << "no CUDA device answers: " << n.error().to_string();
    if (*n == 0) GTEST_SKIP() << "no CUDA device answers: cudaGetDeviceCount found 0 devices";
  }
  EXPECT_EXIT(exit_after_reading_the_epoch(), ::testing::ExitedWithCode(0),
              "epoch_after_teardown=last state=torn_down calls_after_teardown=0");
}

#endif  // FAULTLINE_HAVE_CUDA

}  // namespace
}  // namespace faultline::core::device
