// A stand-in for the CUDA driver (built as libcuda.so.1 in a folder of its own) for the tests of
// the cuda/ fault points on machines without a GPU: a few entry points with the driver's names
// and calling conventions that count their calls, and a cuGetProcAddress_v2 that hands them out
// the way the real driver does (asked "cuMemFree", it gives cuMemFree_v2). fake_cuda_report()
// says what was called; after cuFakeDeinit_fake() cuMemFree_v2 answers CUDA_ERROR_DEINITIALIZED,
// as the real driver does once its exit teardown has run.
//
// Streams and events, for the distributed verdict's tests (the stand-in libnccl enqueues its
// collectives on a stream through cuLaunchHostFunc): a stream is a host thread that runs what was
// enqueued on it in order, as a GPU runs a stream's work; cuEventRecord enqueues a marker that
// completes the event when the thread reaches it; cuEventQuery answers CUDA_SUCCESS or
// CUDA_ERROR_NOT_READY, cuStreamSynchronize and cuEventSynchronize wait. The null stream has no
// thread: work on it is done when enqueued (the stand-in libnccl runs such collectives in the
// call), so an event recorded on it completes at once. One context, never null.
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace {
int mem_free_calls = 0;
unsigned long long last_freed = 0;
int resets = 0;
int reset_device = -1;
int current_device = 0;
double many_sum = 0;
bool deinitialized = false;

// A stream: its thread runs the queue in order. `enqueued` counts what was ever queued, `done` what
// has run; both only grow.
struct fake_stream {
  std::mutex m;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  std::uint64_t enqueued = 0;
  std::uint64_t done = 0;
  bool closing = false;
  std::thread runner;

  fake_stream() : runner([this] { run(); }) {}
  void run() {
    std::unique_lock<std::mutex> lock(m);
    for (;;) {
      changed.wait(lock, [&] { return closing || !queue.empty(); });
      if (queue.empty()) return;
      auto work = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      work();
      lock.lock();
      ++done;
      changed.notify_all();
    }
  }
  void push(std::function<void()> work) {
    std::lock_guard<std::mutex> lock(m);
    queue.push_back(std::move(work));
    ++enqueued;
    changed.notify_all();
  }
  void wait_until(std::uint64_t n) {
    std::unique_lock<std::mutex> lock(m);
    changed.wait(lock, [&] { return done >= n; });
  }
};

// An event: complete once the marker it was last recorded with has run.
struct fake_event {
  std::mutex m;
  std::condition_variable changed;
  std::uint64_t recorded = 0;   // records so far
  std::uint64_t completed = 0;  // the last record whose marker has run
};

int fake_context_word = 0;  // the address is the one context
constexpr int cuda_error_invalid_value = 1;
constexpr int cuda_error_not_ready = 600;

}  // namespace

extern "C" {

int cuInit(unsigned) { return 0; }

int cuCtxGetCurrent(void** context) {
  if (context == nullptr) return cuda_error_invalid_value;
  *context = &fake_context_word;
  return 0;
}
int cuCtxSetCurrent(void*) { return 0; }

int cuStreamCreate(void** stream, unsigned) {
  if (stream == nullptr) return cuda_error_invalid_value;
  *stream = new fake_stream;
  return 0;
}

int cuStreamSynchronize(void* stream) {
  if (stream == nullptr) return 0;
  auto* s = static_cast<fake_stream*>(stream);
  std::uint64_t target = 0;
  {
    std::lock_guard<std::mutex> lock(s->m);
    target = s->enqueued;
  }
  s->wait_until(target);
  return 0;
}

int cuStreamDestroy_v2(void* stream) {
  if (stream == nullptr) return cuda_error_invalid_value;
  auto* s = static_cast<fake_stream*>(stream);
  {
    std::lock_guard<std::mutex> lock(s->m);
    s->closing = true;
    s->changed.notify_all();
  }
  s->runner.join();  // after the queued work, as the driver's destroy lets it finish
  delete s;
  return 0;
}

int cuLaunchHostFunc(void* stream, void (*fn)(void*), void* data) {
  if (fn == nullptr) return cuda_error_invalid_value;
  if (stream == nullptr) {
    fn(data);
    return 0;
  }
  static_cast<fake_stream*>(stream)->push([fn, data] { fn(data); });
  return 0;
}

int cuEventCreate(void** event, unsigned) {
  if (event == nullptr) return cuda_error_invalid_value;
  *event = new fake_event;
  return 0;
}

int cuEventRecord(void* event, void* stream) {
  if (event == nullptr) return cuda_error_invalid_value;
  auto* e = static_cast<fake_event*>(event);
  std::uint64_t mine = 0;
  {
    std::lock_guard<std::mutex> lock(e->m);
    mine = ++e->recorded;
    if (stream == nullptr) e->completed = mine;
  }
  if (stream != nullptr) {
    static_cast<fake_stream*>(stream)->push([e, mine] {
      std::lock_guard<std::mutex> lock(e->m);
      if (e->completed < mine) e->completed = mine;
      e->changed.notify_all();
    });
  }
  return 0;
}

int cuEventQuery(void* event) {
  if (event == nullptr) return cuda_error_invalid_value;
  auto* e = static_cast<fake_event*>(event);
  std::lock_guard<std::mutex> lock(e->m);
  return e->completed == e->recorded ? 0 : cuda_error_not_ready;
}

int cuEventSynchronize(void* event) {
  if (event == nullptr) return cuda_error_invalid_value;
  auto* e = static_cast<fake_event*>(event);
  std::unique_lock<std::mutex> lock(e->m);
  e->changed.wait(lock, [&] { return e->completed == e->recorded; });
  return 0;
}

int cuMemFree_v2(unsigned long long ptr) {
  if (deinitialized) return 4;  // CUDA_ERROR_DEINITIALIZED
  ++mem_free_calls;
  last_freed = ptr;
  return 0;
}

int cuMemAlloc_v2(unsigned long long* ptr, std::size_t bytes) {
  if (ptr == nullptr) return 1;
  *ptr = 0x100000 + bytes;
  return 0;
}

// The same function under a name the agent's dlsym never looks at (cuda_points_bench's baseline).
// Not an alias: dladdr would name cuMemAlloc_v2's address after either.
int fake_raw_cuMemAlloc_v2(unsigned long long* ptr, std::size_t bytes) {
  if (ptr == nullptr) return 1;
  *ptr = 0x100000 + bytes;
  return 0;
}

int cuCtxGetDevice(int* device) {
  *device = current_device;
  return 0;
}

int cuCtxSetCurrentDevice_fake(int device) {  // not a driver call: the child picks a device
  current_device = device;
  return 0;
}

int cuFakeDeinit_fake() {  // not a driver call: the child tears the fake driver down
  deinitialized = true;
  return 0;
}

int cuDevicePrimaryCtxReset_v2(int device) {
  ++resets;
  reset_device = device;
  return 0;
}

// Eight integer arguments (two on the stack) and three doubles: a stub must pass them all.
int cuManyArgs_v2(long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8, double d1, double d2,
                  double d3) {
  many_sum = static_cast<double>(a1 + 2 * a2 + 3 * a3 + 4 * a4 + 5 * a5 + 6 * a6 + 7 * a7 + 8 * a8) + d1 * 10 +
             d2 * 100 + d3 * 1000;
  return 0;
}

int cuGetProcAddress_v2(const char* symbol, void** pfn, int, std::uint64_t, void* status) {
  if (status != nullptr) *static_cast<int*>(status) = 0;
  struct entry {
    const char* name;
    void* fn;
  };
  const entry table[] = {
      {"cuInit", reinterpret_cast<void*>(&cuInit)},
      {"cuMemFree", reinterpret_cast<void*>(&cuMemFree_v2)},
      {"cuMemAlloc", reinterpret_cast<void*>(&cuMemAlloc_v2)},
      {"cuCtxGetDevice", reinterpret_cast<void*>(&cuCtxGetDevice)},
      {"cuManyArgs", reinterpret_cast<void*>(&cuManyArgs_v2)},
      {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress_v2)},
  };
  for (const entry& e : table) {
    if (std::strcmp(e.name, symbol) == 0) {
      *pfn = e.fn;
      return 0;
    }
  }
  *pfn = nullptr;
  return 500;  // CUDA_ERROR_NOT_FOUND
}

void fake_cuda_report() {
  std::printf("fake: frees=%d last=0x%llx resets=%d reset_device=%d many=%.1f\n", mem_free_calls, last_freed, resets,
              reset_device, many_sum);
}

}  // extern "C"
