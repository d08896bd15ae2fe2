// nccl/<API> fault points and each rank's NCCL state (nccl_points.h, nccl_state.h).
//
// Every exported NCCL function below is the same three steps: before() counts the call in the
// rank's state and asks the item that covers it (if any) what to do; the real function is called
// with `in_call` set; after() clears it. What a point does to the rank is written to the state
// before it acts: a rank that SIGKILLs itself can write nothing afterwards.
//
// The state lives in $FAULTLINE_RUN_DIR/nccl.PID, mapped shared and created at the process's first
// NCCL call (a process that makes none leaves no file); without a run directory, or when the file
// cannot be made, in memory, so that the counts and the rank filter still work.
#include "faults/preload/nccl_points.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/host_ids.h"
#include "faults/families.h"
#include "faults/preload/agent.h"
#include "faults/preload/detail/next_symbol.h"
#include "faults/preload/detail/plan_table.h"
#include "faults/preload/detail/points.h"
#include "faults/preload/detail/sys.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/nccl_api.h"
#include "faults/preload/nccl_state.h"
#include "faults/preload/preload_points.h"

namespace {

namespace agent = faultline::agent;
namespace detail = faultline::agent::detail;
using agent::nccl_api;
using agent::nccl_rank_state;

constexpr unsigned max_items = 16;
constexpr unsigned max_spec = 4096;
constexpr unsigned api_count = agent::nccl_api_count;
constexpr int no_library = ncclSystemError;  // what a call answers when no libnccl can be found

char spec_copy[max_spec + 1];
bool have_items = false;
detail::plan_table<max_items> items;

// The real functions, by id: the next definition after the agent, or what dlsym handed out.
std::atomic<void*> real_fn[api_count];

// The item covering each function in this process (-1: none), valid while item_rank matches the
// rank it was looked up for: a rank filter can apply only once the rank is known.
std::atomic<int> item_of[api_count];
std::atomic<std::int64_t> item_rank[api_count];
constexpr std::int64_t not_looked_up = INT64_MIN;

nccl_rank_state memory_state;                // the state when no file could be made
std::atomic<nccl_rank_state*> state{nullptr};  // this process's state, made at its first call
std::atomic_flag making = ATOMIC_FLAG_INIT;

void store(std::uint32_t& field, std::uint32_t v) noexcept { __atomic_store_n(&field, v, __ATOMIC_RELAXED); }
void store(std::int32_t& field, std::int32_t v) noexcept { __atomic_store_n(&field, v, __ATOMIC_RELAXED); }
std::uint32_t bump(std::uint32_t& field) noexcept { return __atomic_add_fetch(&field, 1, __ATOMIC_RELAXED); }

int env_int(const char* name) noexcept {
  const char* v = std::getenv(name);
  if (v == nullptr || *v < '0' || *v > '9') return -1;
  long n = 0;
  for (; *v >= '0' && *v <= '9' && n < 1'000'000'000; ++v) n = n * 10 + (*v - '0');
  return *v == '\0' ? static_cast<int>(n) : -1;
}

// The mapped nccl.PID, or nullptr (no run directory, or it could not be made).
nccl_rank_state* map_state_file(int pid) noexcept {
  const char* dir = agent::run_dir();
  if (dir == nullptr) return nullptr;
  detail::fixed_string<4096> path;
  path.str(dir).str("/").str(agent::nccl_file_prefix).dec(static_cast<std::uint64_t>(pid));
  if (path.overflowed()) return nullptr;
  const int fd = detail::sys::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  void* at = MAP_FAILED;
  if (detail::sys::ftruncate(fd, sizeof(nccl_rank_state)) == 0) {
    at = detail::sys::mmap(nullptr, sizeof(nccl_rank_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  detail::sys::close(fd);
  return at == MAP_FAILED ? nullptr : static_cast<nccl_rank_state*>(at);
}

nccl_rank_state* make_state() noexcept {
  const int pid = static_cast<int>(faultline::core::host_pid());
  nccl_rank_state* s = map_state_file(pid);
  if (s == nullptr) {
    s = &memory_state;
    std::memset(s, 0, sizeof *s);
  }
  s->version = agent::nccl_state_version;
  s->pid = pid;
  const int env_rank = env_int("RANK");
  s->local_rank = env_int("LOCAL_RANK");
  s->rank = env_rank >= 0 ? env_rank : s->local_rank;
  s->nranks = env_int("WORLD_SIZE");
  __atomic_store_n(&s->magic, agent::nccl_state_magic, __ATOMIC_RELEASE);  // filled in: last
  return s;
}

nccl_rank_state& rank_state() noexcept {
  if (nccl_rank_state* s = state.load(std::memory_order_acquire)) return *s;
  while (making.test_and_set(std::memory_order_acquire)) {
  }
  nccl_rank_state* s = state.load(std::memory_order_relaxed);
  if (s == nullptr) {
    s = make_state();
    state.store(s, std::memory_order_release);
  }
  making.clear(std::memory_order_release);
  return *s;
}

// A forked child is a process of its own: a state of its own at its first call. (Its parent's
// mapping stays mapped in it, unused.)
void forget_in_child() noexcept {
  state.store(nullptr, std::memory_order_relaxed);
  making.clear(std::memory_order_relaxed);
}

// The item that covers function `id` in this process, for its current rank; -1 for none.
int item_for(std::uint32_t id, const nccl_rank_state& s) noexcept {
  const std::int64_t rank = __atomic_load_n(&s.rank, __ATOMIC_RELAXED);
  if (item_rank[id].load(std::memory_order_acquire) == rank) return item_of[id].load(std::memory_order_relaxed);
  detail::fixed_string<64> point;
  point.str("nccl/").str(agent::nccl_api_name(id).data());
  detail::fixed_string<32> rank_name;
  rank_name.str(faultline::faults::rank_filter_prefix.data()).dec(static_cast<std::uint64_t>(rank < 0 ? 0 : rank));
  const char* names[] = {rank_name.c_str(), nullptr};
  const int item = items.find(spec_copy, point.c_str(), rank >= 0 ? names : nullptr);
  item_of[id].store(item, std::memory_order_relaxed);
  item_rank[id].store(rank, std::memory_order_release);
  return item;
}

// What the point did, written before it acts (the rank may not live to write it after).
void note_fault(nccl_rank_state& s, agent::nccl_fault_action what, std::uint32_t id, std::uint32_t call, int sig,
                int result) noexcept {
  store(s.fault_api, id);
  store(s.fault_call, call);
  store(s.fault_signal, sig);
  store(s.fault_result, result);
  __atomic_store_n(&s.fault_action, static_cast<std::uint32_t>(what), __ATOMIC_RELEASE);
}

// The item's term fired before call number `call` of `id`: acts, or answers the result to fail with.
bool act_on(const detail::point_term& t, nccl_rank_state& s, std::uint32_t id, std::uint32_t call, int& result) noexcept {
  detail::fixed_string<64> point;
  point.str("nccl/").str(agent::nccl_api_name(id).data());
  using detail::point_action;
  switch (t.action) {
    case point_action::fail:
      note_fault(s, agent::nccl_fault_action::failed, id, call, 0, t.code);
      result = t.code;
      return false;
    case point_action::stop: note_fault(s, agent::nccl_fault_action::stopped, id, call, SIGSTOP, 0); break;
    case point_action::kill: note_fault(s, agent::nccl_fault_action::killed, id, call, SIGKILL, 0); break;
    case point_action::abort: note_fault(s, agent::nccl_fault_action::aborted, id, call, SIGABRT, 0); break;
    case point_action::delay: note_fault(s, agent::nccl_fault_action::delayed, id, call, 0, 0); break;
    default: break;
  }
  agent::preload::act(t, point.c_str());
  return true;
}

// Before a call of `id`: counts it and asks its item. False: do not make the call, answer `result`.
bool before(nccl_api api, int& result) noexcept {
  const auto id = static_cast<std::uint32_t>(api);
  nccl_rank_state& s = rank_state();
  const std::uint32_t call = bump(s.calls[id]);
  if (have_items) {
    const int item = item_for(id, s);
    if (item >= 0) {
      const detail::point_term t = items.hit(item, &agent::preload::draw, &agent::preload::record_reached);
      if (t.action != detail::point_action::off && !act_on(t, s, id, call, result)) return false;
    }
  }
  if (agent::nccl_api_is_collective(id)) {
    bump(s.collectives);
    store(s.last_collective, id);
  }
  __atomic_store_n(&s.in_call, id, __ATOMIC_RELEASE);
  return true;
}

void after() noexcept { __atomic_store_n(&rank_state().in_call, 0u, __ATOMIC_RELEASE); }

// An init names the rank: from now on the rank filter reads it (before the init's own point).
void note_init(int nranks, int rank) noexcept {
  nccl_rank_state& s = rank_state();
  if (__atomic_load_n(&s.comms, __ATOMIC_RELAXED) != 0) return;  // the first communicator names it
  store(s.rank, rank);
  store(s.nranks, nranks);
}

// The path of the loaded libnccl (dl_iterate_phdr's callback): the first module named libnccl*.
int find_libnccl(dl_phdr_info* info, std::size_t, void* out) noexcept {
  const char* path = info->dlpi_name;
  if (path == nullptr) return 0;
  const char* base = std::strrchr(path, '/');
  if (std::strncmp(base != nullptr ? base + 1 : path, "libnccl", 7) != 0) return 0;
  auto* found = static_cast<detail::fixed_string<4096>*>(out);
  found->str(path);
  return 1;
}

// libnccl's own `name` where libnccl is not in the global scope: a dependency of a library that
// was dlopen()ed RTLD_LOCAL, as libtorch_cuda.so is under Python. Its callers' PLT still binds to
// the agent's function first (the preload is in the global scope), but RTLD_NEXT cannot see it:
// it is asked by its own handle, whose lookup starts in libnccl itself.
void* in_local_libnccl(const char* name) noexcept {
  detail::fixed_string<4096> path;
  if (::dl_iterate_phdr(&find_libnccl, &path) == 0 || path.overflowed()) return nullptr;
  void* handle = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  detail::dlsym_fn look = detail::glibc_dlsym();
  void* f = look != nullptr ? look(handle, name) : nullptr;
  ::dlclose(handle);  // NOLOAD took a reference: the library stays loaded
  return f;
}

template <class F>
F real(nccl_api api) noexcept {
  const auto id = static_cast<std::uint32_t>(api);
  void* f = real_fn[id].load(std::memory_order_acquire);
  if (f == nullptr) {
    const char* name = agent::nccl_api_name(id).data();
    f = detail::next_symbol(name);
    if (f == nullptr) f = in_local_libnccl(name);
    if (f != nullptr) real_fn[id].store(f, std::memory_order_release);
  }
  return reinterpret_cast<F>(f);
}

// One call of `api` through the steps above.
template <class F, class... A>
ncclResult_t call(nccl_api api, F*, A... args) noexcept {
  F* f = real<F*>(api);
  int result = ncclSuccess;
  if (!before(api, result)) return static_cast<ncclResult_t>(result);
  const ncclResult_t r = f != nullptr ? f(args...) : static_cast<ncclResult_t>(no_library);
  after();
  return r;
}

}  // namespace

#define FL_NCCL_EXPORT extern "C" [[gnu::visibility("default")]]

FL_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                          ncclRedOp_t op, ncclComm_t comm, nccl_stream_t stream) {
  return call(nccl_api::all_reduce, &ncclAllReduce, send, recv, count, type, op, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                                          ncclComm_t comm, nccl_stream_t stream) {
  return call(nccl_api::all_gather, &ncclAllGather, send, recv, count, type, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                                              ncclRedOp_t op, ncclComm_t comm, nccl_stream_t stream) {
  return call(nccl_api::reduce_scatter, &ncclReduceScatter, send, recv, count, type, op, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                          ncclComm_t comm, nccl_stream_t stream) {
  return call(nccl_api::broadcast, &ncclBroadcast, send, recv, count, type, root, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                       int root, ncclComm_t comm, nccl_stream_t stream) {
  return call(nccl_api::reduce, &ncclReduce, send, recv, count, type, op, root, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                     nccl_stream_t stream) {
  return call(nccl_api::send, &ncclSend, send, count, type, peer, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                     nccl_stream_t stream) {
  return call(nccl_api::recv, &ncclRecv, recv, count, type, peer, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclGroupStart() { return call(nccl_api::group_start, &ncclGroupStart); }
FL_NCCL_EXPORT ncclResult_t ncclGroupEnd() { return call(nccl_api::group_end, &ncclGroupEnd); }
FL_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  note_init(nranks, rank);
  const ncclResult_t r = call(nccl_api::comm_init_rank, &ncclCommInitRank, comm, nranks, id, rank);
  if (r == ncclSuccess) bump(rank_state().comms);
  return r;
}
FL_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                                   ncclConfig_t* config) {
  note_init(nranks, rank);
  const ncclResult_t r = call(nccl_api::comm_init_rank_config, &ncclCommInitRankConfig, comm, nranks, id, rank, config);
  if (r == ncclSuccess) bump(rank_state().comms);
  return r;
}
FL_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return call(nccl_api::comm_finalize, &ncclCommFinalize, comm);
}
FL_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) { return call(nccl_api::comm_abort, &ncclCommAbort, comm); }
FL_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return call(nccl_api::comm_destroy, &ncclCommDestroy, comm);
}

namespace faultline::agent::nccl_points {

bool install(const char* spec) noexcept {
  for (auto& r : item_rank) r.store(not_looked_up, std::memory_order_relaxed);
  static bool registered = false;
  if (!registered) registered = ::pthread_atfork(nullptr, nullptr, &forget_in_child) == 0;
  if (spec == nullptr || std::strlen(spec) > max_spec) return false;
  if (!faults::spec_reaches(spec, faults::injector::nccl)) return false;
  std::memcpy(spec_copy, spec, std::strlen(spec) + 1);
  have_items = true;
  return true;
}

void* wrap_dlsym(const char* name, void* real_function) noexcept {
  if (name == nullptr || real_function == nullptr || std::strncmp(name, "nccl", 4) != 0) return nullptr;
  const std::size_t id = faults::nccl_function_id(name);
  if (id == 0) return nullptr;
  Dl_info info{};
  if (::dladdr(real_function, &info) == 0 || info.dli_fname == nullptr) return nullptr;
  const char* base = std::strrchr(info.dli_fname, '/');
  if (std::strncmp(base != nullptr ? base + 1 : info.dli_fname, "libnccl", 7) != 0) return nullptr;
  // The agent's own functions, by id (nccl_api's order).
  static void* const own[] = {
      nullptr,
      reinterpret_cast<void*>(&ncclAllReduce),
      reinterpret_cast<void*>(&ncclAllGather),
      reinterpret_cast<void*>(&ncclReduceScatter),
      reinterpret_cast<void*>(&ncclBroadcast),
      reinterpret_cast<void*>(&ncclReduce),
      reinterpret_cast<void*>(&ncclSend),
      reinterpret_cast<void*>(&ncclRecv),
      reinterpret_cast<void*>(&ncclGroupStart),
      reinterpret_cast<void*>(&ncclGroupEnd),
      reinterpret_cast<void*>(&ncclCommInitRank),
      reinterpret_cast<void*>(&ncclCommInitRankConfig),
      reinterpret_cast<void*>(&ncclCommFinalize),
      reinterpret_cast<void*>(&ncclCommAbort),
      reinterpret_cast<void*>(&ncclCommDestroy),
  };
  static_assert(sizeof(own) / sizeof(own[0]) == api_count);
  real_fn[id].store(real_function, std::memory_order_release);
  return own[id];
}

}  // namespace faultline::agent::nccl_points
