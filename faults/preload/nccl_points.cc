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
//
// A collective that was made is also written into the state's ring (its sequence numbers, its
// arguments, its communicator), and, where a CUDA driver is loaded, followed by an event recorded
// on its stream: the driver's functions are looked up once in the loaded libcuda (never loading
// it), and 64 events per process are reused round the ring; a collective inside a group gets its
// event once the outermost ncclGroupEnd has enqueued the group. Before each collective the oldest
// events not yet known complete are queried (usually one cuEventQuery), and `completed` moves on.
// A rank blocked in a stream synchronize makes no more calls, so the first event recorded starts
// one thread that sleeps on the file's `query_request` futex word; the runner bumps it at a
// hang's deadline, and the thread queries the events and answers (`query_answer`).
#include "faults/preload/nccl_points.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

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
bool file_backed = false;                    // the state is nccl.PID (the runner may ask it)
std::atomic<nccl_rank_state*> state{nullptr};  // this process's state, made at its first call
std::atomic_flag making = ATOMIC_FLAG_INIT;

void store(std::uint32_t& field, std::uint32_t v) noexcept { __atomic_store_n(&field, v, __ATOMIC_RELAXED); }
void store(std::int32_t& field, std::int32_t v) noexcept { __atomic_store_n(&field, v, __ATOMIC_RELAXED); }
void store(std::uint64_t& field, std::uint64_t v) noexcept { __atomic_store_n(&field, v, __ATOMIC_RELAXED); }
std::uint32_t load(const std::uint32_t& field) noexcept { return __atomic_load_n(&field, __ATOMIC_RELAXED); }
std::uint32_t bump(std::uint32_t& field) noexcept { return __atomic_add_fetch(&field, 1, __ATOMIC_RELAXED); }

int env_int(const char* name) noexcept {
  const char* v = std::getenv(name);
  if (v == nullptr || *v < '0' || *v > '9') return -1;
  long n = 0;
  for (; *v >= '0' && *v <= '9' && n < 1'000'000'000; ++v) n = n * 10 + (*v - '0');
  return *v == '\0' ? static_cast<int>(n) : -1;
}

// nccl.PID, mapped under the name nccl.PID.new until make_state has filled it in and renamed it:
// a reader (the runner, a test) never sees it empty or half written, however early the process
// is killed. nullptr when there is no run directory or it could not be made.
nccl_rank_state* map_state_file(int pid, detail::fixed_string<4096>& path) noexcept {
  const char* dir = agent::run_dir();
  if (dir == nullptr) return nullptr;
  path.str(dir).str("/").str(agent::nccl_file_prefix).dec(static_cast<std::uint64_t>(pid));
  detail::fixed_string<4096> fresh;
  fresh.str(path.c_str()).str(".new");
  if (path.overflowed() || fresh.overflowed()) return nullptr;
  const int fd = detail::sys::open(fresh.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
  detail::fixed_string<4096> path;
  nccl_rank_state* s = map_state_file(pid, path);
  file_backed = s != nullptr;
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
  if (file_backed) {
    detail::fixed_string<4096> fresh;
    fresh.str(path.c_str()).str(".new");
    // Under its name only now. If the rename fails, the runner never sees this rank's file.
    if (detail::sys::rename(fresh.c_str(), path.c_str()) != 0) file_backed = false;
  }
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

// --- Completion: CUDA events after each collective (see the file comment) ---

// The driver's functions the agent uses, from the loaded libcuda (its C ABI: CUresult is an int,
// CUevent, CUstream and CUcontext are pointers).
using cu_event_create_fn = int (*)(void**, unsigned);
using cu_event_record_fn = int (*)(void*, void*);
using cu_event_query_fn = int (*)(void*);
using cu_ctx_get_fn = int (*)(void**);
using cu_ctx_set_fn = int (*)(void*);
constexpr int cuda_success = 0;
constexpr unsigned event_disable_timing = 0x2;  // CU_EVENT_DISABLE_TIMING
constexpr std::uint32_t event_slots = 64;

struct driver_functions {
  cu_event_create_fn event_create = nullptr;
  cu_event_record_fn event_record = nullptr;
  cu_event_query_fn event_query = nullptr;
  cu_ctx_get_fn ctx_get = nullptr;
  cu_ctx_set_fn ctx_set = nullptr;
};

// 0: not looked up yet; 1: found; 2: no libcuda (or not all of them): no events in this process.
std::atomic<int> driver_looked_up{0};
driver_functions driver;

struct event_slot {
  void* event = nullptr;
  std::uint32_t seq = 0;  // the collective it was last recorded after; 0: never
};
event_slot events[event_slots];  // guarded by events_lock
void* events_context = nullptr;  // the context the events were made in
std::atomic_flag events_lock = ATOMIC_FLAG_INIT;
std::atomic<bool> watcher_started{false};

bool look_up_driver() noexcept {
  int seen = driver_looked_up.load(std::memory_order_acquire);
  if (seen != 0) return seen == 1;
  void* handle = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);  // never loads it
  detail::dlsym_fn look = detail::glibc_dlsym();
  bool found = false;
  if (handle != nullptr && look != nullptr) {
    driver.event_create = reinterpret_cast<cu_event_create_fn>(look(handle, "cuEventCreate"));
    driver.event_record = reinterpret_cast<cu_event_record_fn>(look(handle, "cuEventRecord"));
    driver.event_query = reinterpret_cast<cu_event_query_fn>(look(handle, "cuEventQuery"));
    driver.ctx_get = reinterpret_cast<cu_ctx_get_fn>(look(handle, "cuCtxGetCurrent"));
    driver.ctx_set = reinterpret_cast<cu_ctx_set_fn>(look(handle, "cuCtxSetCurrent"));
    found = driver.event_create && driver.event_record && driver.event_query && driver.ctx_get && driver.ctx_set;
  }
  if (handle != nullptr) ::dlclose(handle);  // NOLOAD took a reference: the library stays loaded
  driver_looked_up.store(found ? 1 : 2, std::memory_order_release);
  return found;
}

void lock_events() noexcept {
  while (events_lock.test_and_set(std::memory_order_acquire)) {
  }
}
void unlock_events() noexcept { events_lock.clear(std::memory_order_release); }

// Moves `completed` on past every collective whose event (or a later one's) has completed; stops
// at the first that has not. A collective with no event of its own counts complete once a later
// one is. Holds events_lock.
void advance_completed(nccl_rank_state& s) noexcept {
  const std::uint32_t issued = load(s.collectives);
  std::uint32_t done = load(s.completed);
  for (std::uint32_t x = done + 1, looked = 0; x <= issued && looked < event_slots; ++x, ++looked) {
    const event_slot& e = events[x % event_slots];
    if (e.event == nullptr || e.seq < x) continue;  // none for x: a later one decides
    if (driver.event_query(e.event) != cuda_success) break;  // not ready (or an error): stop here
    done = x;
  }
  store(s.completed, done);
}

long futex(std::uint32_t* word, int op, std::uint32_t value, const timespec* timeout = nullptr) noexcept {
  return ::syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

// The thread that answers the runner's requests (nccl_state.h: query_request): sleeps on the
// shared file's futex word, never on anything of the program's.
void* answer_queries(void* arg) noexcept {
  auto* s = static_cast<nccl_rank_state*>(arg);
  if (events_context != nullptr) driver.ctx_set(events_context);
  std::uint32_t served = __atomic_load_n(&s->query_request, __ATOMIC_ACQUIRE);
  for (;;) {
    std::uint32_t asked = __atomic_load_n(&s->query_request, __ATOMIC_ACQUIRE);
    if (asked == served) {
      futex(&s->query_request, FUTEX_WAIT, served);
      continue;
    }
    lock_events();
    advance_completed(*s);
    unlock_events();
    served = asked;
    __atomic_store_n(&s->query_answer, served, __ATOMIC_RELEASE);
    futex(&s->query_answer, FUTEX_WAKE, INT32_MAX);
  }
  return nullptr;
}

void start_answering(nccl_rank_state& s) noexcept {
  if (!file_backed || watcher_started.exchange(true, std::memory_order_acq_rel)) return;
  pthread_attr_t attr;
  if (::pthread_attr_init(&attr) != 0) return;
  ::pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  ::pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_t thread;
  if (::pthread_create(&thread, &attr, &answer_queries, &s) == 0) __atomic_store_n(&s.answers, 1u, __ATOMIC_RELEASE);
  ::pthread_attr_destroy(&attr);
}

// After collective `seq` was enqueued on `stream`: the oldest pending events are asked first, then
// an event is recorded after it. Nothing without a driver or a current context.
void follow_completion(nccl_rank_state& s, std::uint32_t seq, void* stream) noexcept {
  if (!look_up_driver()) return;
  void* context = nullptr;
  if (driver.ctx_get(&context) != cuda_success || context == nullptr) return;
  lock_events();
  if (events_context == nullptr) events_context = context;
  if (context == events_context) {
    advance_completed(s);
    event_slot& e = events[seq % event_slots];
    if (e.event == nullptr && driver.event_create(&e.event, event_disable_timing) != cuda_success) e.event = nullptr;
    if (e.event != nullptr && driver.event_record(e.event, stream) == cuda_success) {
      e.seq = seq;
      __atomic_store_n(&s.completion_known, 1u, __ATOMIC_RELEASE);
    }
  }
  unlock_events();
  if (load(s.completion_known) != 0) start_answering(s);
}

// --- The collectives' record ---

// The communicator's id from its unique id: FNV-1a over its 128 bytes, never 0.
std::uint64_t comm_id_of(const ncclUniqueId& id) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  for (char c : id.internal) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h != 0 ? h : 1;
}

// What a collective is, as the ring keeps it.
struct collective_args {
  ncclComm_t comm;
  std::uint64_t count;
  int datatype;
  int root;        // -1 for none
  std::uint32_t op;  // agent::nccl_no_op for none
};

// The entry of this process's communicator `comm`, nullptr for one it did not see made.
agent::nccl_comm_entry* comm_entry(nccl_rank_state& s, ncclComm_t comm) noexcept {
  const auto handle = reinterpret_cast<std::uint64_t>(comm);
  const std::uint32_t n = load(s.comm_count);
  for (std::uint32_t i = 0; i < n && i < agent::nccl_comm_slots; ++i)
    if (__atomic_load_n(&s.comm_table[i].handle, __ATOMIC_RELAXED) == handle) return &s.comm_table[i];
  return nullptr;
}

// Collective number `seq` of the rank was made: its entry in the ring, seq stored last.
void record_collective(nccl_rank_state& s, std::uint32_t seq, std::uint32_t id, const collective_args& a) noexcept {
  agent::nccl_comm_entry* c = comm_entry(s, a.comm);
  agent::nccl_collective_entry& e = s.ring[seq % agent::nccl_ring_size];
  __atomic_store_n(&e.seq, 0u, __ATOMIC_RELAXED);
  store(e.count, a.count);
  store(e.comm, c != nullptr ? c->id : 0);
  store(e.comm_seq, c != nullptr ? bump(c->collectives) : seq);
  store(e.api, id);
  store(e.datatype, static_cast<std::uint32_t>(a.datatype));
  store(e.root, a.root);
  store(e.op, a.op);
  __atomic_store_n(&e.seq, seq, __ATOMIC_RELEASE);
}


// A forked child is a process of its own: a state of its own at its first call. (Its parent's
// mapping stays mapped in it, unused.)
void forget_in_child() noexcept {
  state.store(nullptr, std::memory_order_relaxed);
  making.clear(std::memory_order_relaxed);
  // The parent's events are of its context, and its thread did not come along.
  for (auto& e : events) e = event_slot{};
  events_context = nullptr;
  events_lock.clear(std::memory_order_relaxed);
  watcher_started.store(false, std::memory_order_relaxed);
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
                int result, const char* item, std::uint64_t delay_ns) noexcept {
  store(s.fault_api, id);
  store(s.fault_call, call);
  store(s.fault_signal, sig);
  store(s.fault_result, result);
  store(s.fault_delay_ns, delay_ns);
  std::size_t n = 0;
  for (; item != nullptr && item[n] != '\0' && n + 1 < agent::nccl_item_chars; ++n) s.fault_item[n] = item[n];
  s.fault_item[n] = '\0';
  store(s.fault_active, 1u);
  __atomic_store_n(&s.fault_action, static_cast<std::uint32_t>(what), __ATOMIC_RELEASE);
}

// The item's term fired before call number `call` of `id`: acts, or answers the result to fail with.
bool act_on(const detail::point_term& t, const char* item, nccl_rank_state& s, std::uint32_t id, std::uint32_t call,
            int& result) noexcept {
  detail::fixed_string<64> point;
  point.str("nccl/").str(agent::nccl_api_name(id).data());
  using detail::point_action;
  using agent::nccl_fault_action;
  switch (t.action) {
    case point_action::fail:
      note_fault(s, nccl_fault_action::failed, id, call, 0, t.code, item, 0);
      store(s.fault_active, 0u);
      result = t.code;
      return false;
    case point_action::stop: note_fault(s, nccl_fault_action::stopped, id, call, SIGSTOP, 0, item, 0); break;
    case point_action::kill: note_fault(s, nccl_fault_action::killed, id, call, SIGKILL, 0, item, 0); break;
    case point_action::abort: note_fault(s, nccl_fault_action::aborted, id, call, SIGABRT, 0, item, 0); break;
    case point_action::delay: note_fault(s, nccl_fault_action::delayed, id, call, 0, 0, item, t.delay_ns); break;
    default: break;
  }
  agent::preload::act(t, point.c_str());
  store(s.fault_active, 0u);  // continued, or awake: the call goes on
  return true;
}

// Before a call of `id`: counts it and asks its item. False: do not make the call, answer
// `result`. A collective that is made (`args`) is numbered and written into the ring.
bool before(nccl_api api, int& result, const collective_args* args = nullptr) noexcept {
  const auto id = static_cast<std::uint32_t>(api);
  nccl_rank_state& s = rank_state();
  const std::uint32_t call = bump(s.calls[id]);
  if (have_items) {
    const int item = item_for(id, s);
    if (item >= 0) {
      const detail::point_term t = items.hit(item, &agent::preload::draw, &agent::preload::record_reached);
      if (t.action != detail::point_action::off && !act_on(t, items.pattern(item), s, id, call, result)) return false;
    }
  }
  if (args != nullptr) {
    const std::uint32_t seq = bump(s.collectives);
    store(s.last_collective, id);
    record_collective(s, seq, id, *args);
  }
  __atomic_store_n(&s.in_call, id, __ATOMIC_RELEASE);
  return true;
}

void after() noexcept { __atomic_store_n(&rank_state().in_call, 0u, __ATOMIC_RELEASE); }

// An init names the rank: from now on the rank filter reads it (before the init's own point). The
// communicator is entered in the state before the call, so that a rank whose init fails or never
// returns still belongs to it.
agent::nccl_comm_entry* note_init(int nranks, int rank, const ncclUniqueId& unique_id) noexcept {
  nccl_rank_state& s = rank_state();
  if (__atomic_load_n(&s.comms, __ATOMIC_RELAXED) == 0) {  // the first communicator names it
    store(s.rank, rank);
    store(s.nranks, nranks);
  }
  const std::uint64_t id = comm_id_of(unique_id);
  const std::uint32_t slot = load(s.comm_count);
  // A library whose ncclCommInitRankConfig calls ncclCommInitRank through its PLT makes one
  // communicator in two calls: one entry.
  for (std::uint32_t i = 0; i < slot && i < agent::nccl_comm_slots; ++i)
    if (__atomic_load_n(&s.comm_table[i].id, __ATOMIC_RELAXED) == id) return &s.comm_table[i];
  if (slot >= agent::nccl_comm_slots) return nullptr;
  agent::nccl_comm_entry& c = s.comm_table[slot];
  store(c.id, id);
  store(c.nranks, nranks);
  store(c.rank, rank);
  __atomic_store_n(&s.comm_count, slot + 1, __ATOMIC_RELEASE);
  return &c;
}

// The init returned: the entry takes the communicator's handle, by which collectives find it.
void note_comm(agent::nccl_comm_entry* c, ncclResult_t r, ncclComm_t* comm) noexcept {
  if (r != ncclSuccess) return;
  bump(rank_state().comms);
  if (c != nullptr && comm != nullptr) __atomic_store_n(&c->handle, reinterpret_cast<std::uint64_t>(*comm), __ATOMIC_RELEASE);
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

// Inside ncclGroupStart/ncclGroupEnd NCCL enqueues nothing until the outermost ncclGroupEnd: an
// event recorded after a collective there would mark the stream before the collective's work.
// Its event waits for that ncclGroupEnd. (NCCL's groups are per thread; PyTorch calls them from
// one: a process-wide depth.)
struct grouped_collective {
  std::uint32_t seq;
  void* stream;
};
constexpr std::uint32_t max_grouped = 64;  // beyond: no event of its own (a later one decides)
std::atomic<std::uint32_t> group_depth{0};
grouped_collective grouped[max_grouped];
std::uint32_t grouped_count = 0;

// One collective: numbered and recorded when it is made, followed by an event on its stream.
template <class F, class... A>
ncclResult_t collective(nccl_api api, const collective_args& what, nccl_stream_t stream, F*, A... args) noexcept {
  F* f = real<F*>(api);
  int result = ncclSuccess;
  if (!before(api, result, &what)) return static_cast<ncclResult_t>(result);
  const ncclResult_t r = f != nullptr ? f(args...) : static_cast<ncclResult_t>(no_library);
  nccl_rank_state& s = rank_state();
  if (r == ncclSuccess && file_backed) {
    if (group_depth.load(std::memory_order_relaxed) == 0) follow_completion(s, load(s.collectives), stream);
    else if (grouped_count < max_grouped) grouped[grouped_count++] = {load(s.collectives), stream};
  }
  __atomic_store_n(&s.in_call, 0u, __ATOMIC_RELEASE);
  return r;
}

// The outermost ncclGroupEnd returned: the group's collectives are enqueued, their events follow.
void end_group(ncclResult_t r) noexcept {
  std::uint32_t depth = group_depth.load(std::memory_order_relaxed);
  if (depth == 0) return;
  group_depth.store(--depth, std::memory_order_relaxed);
  if (depth != 0) return;
  const std::uint32_t n = grouped_count;
  grouped_count = 0;
  if (r != ncclSuccess && r != ncclInProgress) return;
  nccl_rank_state& s = rank_state();
  for (std::uint32_t i = 0; i < n; ++i) follow_completion(s, grouped[i].seq, grouped[i].stream);
}

constexpr std::uint32_t no_op = agent::nccl_no_op;

}  // namespace

#define FL_NCCL_EXPORT extern "C" [[gnu::visibility("default")]]

FL_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                          ncclRedOp_t op, ncclComm_t comm, nccl_stream_t stream) {
  return collective(nccl_api::all_reduce, {comm, count, type, -1, static_cast<std::uint32_t>(op)}, stream, &ncclAllReduce,
                    send, recv, count, type, op, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                                          ncclComm_t comm, nccl_stream_t stream) {
  return collective(nccl_api::all_gather, {comm, count, type, -1, no_op}, stream, &ncclAllGather, send, recv, count, type,
                    comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                                              ncclRedOp_t op, ncclComm_t comm, nccl_stream_t stream) {
  return collective(nccl_api::reduce_scatter, {comm, count, type, -1, static_cast<std::uint32_t>(op)}, stream,
                    &ncclReduceScatter, send, recv, count, type, op, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                          ncclComm_t comm, nccl_stream_t stream) {
  return collective(nccl_api::broadcast, {comm, count, type, root, no_op}, stream, &ncclBroadcast, send, recv, count, type,
                    root, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                       int root, ncclComm_t comm, nccl_stream_t stream) {
  return collective(nccl_api::reduce, {comm, count, type, root, static_cast<std::uint32_t>(op)}, stream, &ncclReduce, send,
                    recv, count, type, op, root, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                     nccl_stream_t stream) {
  return call(nccl_api::send, &ncclSend, send, count, type, peer, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                     nccl_stream_t stream) {
  return call(nccl_api::recv, &ncclRecv, recv, count, type, peer, comm, stream);
}
FL_NCCL_EXPORT ncclResult_t ncclGroupStart() {
  const ncclResult_t r = call(nccl_api::group_start, &ncclGroupStart);
  if (r == ncclSuccess) group_depth.fetch_add(1, std::memory_order_relaxed);
  return r;
}
FL_NCCL_EXPORT ncclResult_t ncclGroupEnd() {
  const ncclResult_t r = call(nccl_api::group_end, &ncclGroupEnd);
  end_group(r);
  return r;
}
FL_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  agent::nccl_comm_entry* c = note_init(nranks, rank, id);
  const ncclResult_t r = call(nccl_api::comm_init_rank, &ncclCommInitRank, comm, nranks, id, rank);
  note_comm(c, r, comm);
  return r;
}
FL_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                                   ncclConfig_t* config) {
  agent::nccl_comm_entry* c = note_init(nranks, rank, id);
  const ncclResult_t r = call(nccl_api::comm_init_rank_config, &ncclCommInitRankConfig, comm, nranks, id, rank, config);
  note_comm(c, r, comm);
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

void note_exit(int status) noexcept {
  nccl_rank_state* s = state.load(std::memory_order_acquire);
  if (s == nullptr) return;  // no NCCL call: no file
  store(s->exit_code, status);
  __atomic_store_n(&s->exited, 1u, __ATOMIC_RELEASE);
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
