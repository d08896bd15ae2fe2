// Late CUDA calls (protocol.h, late-cuda.PID): the preloaded agent is also the process's CUDA
// injection library. `faultline exec` sets CUDA_INJECTION64_PATH to libfaultline_agent.so, which
// the process has already loaded, so the driver's dlopen at cuInit returns the same library and
// calls its InitializeInjection() — for a program linked with the static runtime as much as for
// one with libcudart.so, and in every process of the run's tree that initialises CUDA.
//
// InitializeInjection loads CUPTI (libcupti.so.13 from the loader's path, else beside the agent,
// where ci/gpu/carry.sh puts it) and subscribes, but enables no callback domain: the work phase
// pays nothing per call. The preload's exit hooks call arm_late_cuda() when main returns or
// exit() begins; from then on every runtime and driver call comes back through on_call(), which
// records the ones answered "runtime unloading" / "deinitialized": calls made after the runtime's
// teardown, which a pre-fix RMM makes from its static pool's destructor.
// The driver answers CUDA_ERROR_DEINITIALIZED after its own teardown without reporting the call
// to CUPTI: those calls are seen by the driver's stubs (cuda_points.h, watch_late_driver_calls),
// which the preload's constructor installs for --late-cuda, and arm_late_cuda() arms too.
// FAULTLINE_LATE_CUDA=0 turns it off (InitializeInjection then does nothing); =debug says on
// stderr what it does and every call it sees once armed.
#include "faults/preload/late_cuda.h"

#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "faults/preload/agent.h"
#include "faults/preload/cuda_points.h"
#include "faults/preload/detail/text.h"

namespace {

// The values the runtime and the driver answer once they are torn down (driver_types.h, cuda.h).
constexpr int cudart_unloading = 4;      // cudaErrorCudartUnloading
constexpr int driver_deinitialized = 4;  // CUDA_ERROR_DEINITIALIZED
static_assert(CUDA_ERROR_DEINITIALIZED == driver_deinitialized);

using subscribe_fn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
using enable_domain_fn = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);

using enable_callback_fn = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
using callback_name_fn = CUptiResult (*)(CUpti_CallbackDomain, uint32_t, const char**);

CUpti_SubscriberHandle subscriber = nullptr;
enable_domain_fn enable_domain = nullptr;
bool late_on = false;  // FAULTLINE_LATE_CUDA is not "0"
// The cuda/ item (cuda_points.h) standing before each runtime function, by CUPTI callback id.
signed char runtime_items[CUPTI_RUNTIME_TRACE_CBID_SIZE];
std::atomic<bool> subscribed{false};
std::atomic<bool> armed{false};
std::atomic<bool> enabled{false};
bool debug = false;  // FAULTLINE_LATE_CUDA=debug: say on stderr what happens

void say(const char* what, const char* detail = "", long value = 0) {
  if (!debug) return;
  faultline::agent::detail::fd_writer err(2);
  err.str("faultline-agent (late-cuda): ").str(what).chr(' ').str(detail).chr(' ').dec(value).chr('\n');
}

void CUPTIAPI on_call(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  const auto* call = static_cast<const CUpti_CallbackData*>(data);
  if (call == nullptr) return;
  if (call->callbackSite == CUPTI_API_ENTER) {
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && id < CUPTI_RUNTIME_TRACE_CBID_SIZE && runtime_items[id] >= 0) {
      faultline::agent::cuda_points::runtime_hit(runtime_items[id], call->functionName);
    }
    return;
  }
  if (!late_on || call->callbackSite != CUPTI_API_EXIT || call->functionReturnValue == nullptr) return;
  int result = 0;
  std::memcpy(&result, call->functionReturnValue, sizeof result);  // cudaError_t or CUresult
  const bool late = (domain == CUPTI_CB_DOMAIN_RUNTIME_API && result == cudart_unloading) ||
                    (domain == CUPTI_CB_DOMAIN_DRIVER_API && result == driver_deinitialized);
  say(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "runtime call" : "driver call", call->functionName, result);
  if (!late) return;
  (void)faultline::agent::record_late_cuda(call->functionName ? call->functionName : "?", result);
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) faultline::agent::cuda_points::note_cupti_recorded();
}

// Enables the two API domains once both the subscription and the exit are there.
void enable_when_ready() {
  if (!late_on || !subscribed.load() || !armed.load() || enabled.exchange(true)) return;
  const CUptiResult runtime = enable_domain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
  const CUptiResult driver = enable_domain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  say("enabled runtime, driver:", "", static_cast<long>(runtime) * 1000 + static_cast<long>(driver));
}

void* open_cupti() {
  if (void* h = ::dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL)) return h;
  Dl_info self{};
  if (::dladdr(reinterpret_cast<void*>(&open_cupti), &self) == 0 || self.dli_fname == nullptr) return nullptr;
  faultline::agent::detail::fixed_string<PATH_MAX> path;
  path.str(self.dli_fname);
  if (path.overflowed()) return nullptr;
  char dir[PATH_MAX];
  std::memcpy(dir, path.c_str(), path.size() + 1);
  char* slash = std::strrchr(dir, '/');
  if (slash == nullptr) return nullptr;
  std::strcpy(slash, "/libcupti.so.13");  // shorter than the library's own name
  return ::dlopen(dir, RTLD_NOW | RTLD_LOCAL);
}

// Enables CUPTI's runtime callbacks for the functions a cuda/ item names, from now on.
void enable_runtime_points(void* cupti) {
  auto enable = reinterpret_cast<enable_callback_fn>(::dlsym(cupti, "cuptiEnableCallback"));
  auto name_of = reinterpret_cast<callback_name_fn>(::dlsym(cupti, "cuptiGetCallbackName"));
  if (enable == nullptr || name_of == nullptr) return;
  for (uint32_t id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id) {
    const char* name = nullptr;
    if (name_of(CUPTI_CB_DOMAIN_RUNTIME_API, id, &name) != CUPTI_SUCCESS || name == nullptr) continue;
    const int item = faultline::agent::cuda_points::runtime_item(name);
    if (item < 0) continue;
    runtime_items[id] = static_cast<signed char>(item);
    const CUptiResult r = enable(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id);
    say("runtime point on", name, r);
  }
}

}  // namespace

extern "C" [[gnu::visibility("default")]] int InitializeInjection() {
  const char* off = std::getenv("FAULTLINE_LATE_CUDA");
  debug = off != nullptr && std::strcmp(off, "debug") == 0;
  late_on = off == nullptr || std::strcmp(off, "0") != 0;
  std::memset(runtime_items, -1, sizeof runtime_items);
  const bool points = faultline::agent::cuda_points::runtime_points();
  say("InitializeInjection, agent installed:", "", faultline::agent::installed());
  if ((!late_on && !points) || !faultline::agent::installed()) return 1;
  void* cupti = open_cupti();
  say("libcupti", cupti != nullptr ? "loaded" : ::dlerror());
  if (cupti == nullptr) return 1;
  auto subscribe = reinterpret_cast<subscribe_fn>(::dlsym(cupti, "cuptiSubscribe"));
  enable_domain = reinterpret_cast<enable_domain_fn>(::dlsym(cupti, "cuptiEnableDomain"));
  if (subscribe == nullptr || enable_domain == nullptr) return 1;
  // Another tool (a profiler) may hold CUPTI's one subscriber: then late calls go unseen.
  const CUptiResult sub = subscribe(&subscriber, &on_call, nullptr);
  say("cuptiSubscribe", "", sub);
  if (sub != CUPTI_SUCCESS) return 1;
  subscribed.store(true);
  if (points) enable_runtime_points(cupti);
  // Loaded by CUDA into a program this library did not start (its main is not wrapped: only
  // CUDA_INJECTION64_PATH names it, without LD_PRELOAD), it has no hook at the start of exit, and
  // an exit handler registered now would run after the runtime's own teardown, which the runtime
  // registers as it starts, when CUPTI no longer reports its calls. So it watches from now on:
  // every call pays CUPTI's callback, and only those answered "unloading" are recorded. (Its
  // driver stubs are not there: they are installed when the library is preloaded.)
  if (late_on && !faultline::agent::started_main()) {
    armed.store(true);
    faultline::agent::cuda_points::arm_late();
  }
  enable_when_ready();
  return 1;
}

namespace faultline::agent {

void arm_late_cuda() noexcept {
  say("armed at exit");
  cuda_points::arm_late();  // the driver's stubs (cuda_points.h), with or without CUPTI
  armed.store(true);
  enable_when_ready();
}

}  // namespace faultline::agent
