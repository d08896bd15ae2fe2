// A stand-in libnccl.so.2 for machines without GPUs (as fake_libcuda.cc stands in for the
// driver): the nccl/ points' tests run a real multi-process NCCL program against it on CI.
//
// It keeps NCCL's semantics where the tests look: ncclCommInitRank blocks until every rank has
// joined; a collective blocks until every rank has reached the same collective, so that a rank
// that stops leaves the others waiting for ever; the results are computed for real (over host
// memory). On the null stream a collective runs inside the call, which returns once it is done.
// On a stream (the stand-in driver's, testing/fake_libcuda.cc) it is enqueued with the driver's
// cuLaunchHostFunc and the call returns at once, as NCCL's does: the stream's work waits for the
// peers, and the rank waits later, in cuStreamSynchronize. Ranks that meet at a collective but
// issued different ones (another API, count, datatype, root or op) wait there for ever, as NCCL's
// kernels wait for peers that run another one: a desync hangs. The ranks meet in a POSIX shared
// memory segment named by the unique id, with process-shared futexes; the last rank to destroy
// its communicator unlinks it. Nothing here comes from NCCL's code.
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <new>
#include <vector>

#include "faults/preload/nccl_api.h"

namespace {

constexpr int max_ranks = 8;
constexpr std::size_t slot_bytes = 1 << 20;     // each rank's part of a collective
constexpr std::size_t mailbox_bytes = 1 << 16;  // one send/recv pair's message

struct mailbox {
  std::atomic<std::uint32_t> full;  // futex: 0 empty, 1 holds `bytes`
  std::uint32_t bytes;
  unsigned char data[mailbox_bytes];
};

// What a rank issued at a collective, for the others to compare with theirs.
struct collective_desc {
  std::uint32_t api;  // 1 allreduce, 2 allgather, 3 reducescatter, 4 broadcast, 5 reduce
  std::uint32_t datatype;
  std::uint64_t count;
  std::int32_t root;
  std::uint32_t op;
  bool operator==(const collective_desc&) const = default;
};

// The segment the ranks share. Zero-filled when created: every field starts valid at zero.
struct shared {
  collective_desc descs[max_ranks];
  std::atomic<std::uint32_t> arrived;      // ranks at the barrier
  std::atomic<std::uint32_t> generation;   // futex: bumped by the last rank to arrive
  std::atomic<std::uint32_t> destroyed;    // ranks whose communicator is gone
  mailbox boxes[max_ranks][max_ranks];     // [from][to]
  unsigned char slots[max_ranks][slot_bytes];
};

}  // namespace

struct ncclComm {
  shared* s;
  int nranks;
  int rank;
  char name[NCCL_UNIQUE_ID_BYTES];
};

namespace {

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value) {
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, nullptr, nullptr, 0);
}

// Every rank of the communicator arrives before any leaves: no timeout, as NCCL has none.
void barrier(ncclComm* c) {
  shared* s = c->s;
  const std::uint32_t gen = s->generation.load(std::memory_order_acquire);
  if (s->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(c->nranks)) {
    s->arrived.store(0, std::memory_order_relaxed);
    s->generation.fetch_add(1, std::memory_order_release);
    if (c->nranks > 1) futex(&s->generation, FUTEX_WAKE, INT32_MAX);  // alone: nobody to wake
    return;
  }
  while (s->generation.load(std::memory_order_acquire) == gen) futex(&s->generation, FUTEX_WAIT, gen);
}

std::size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

template <class T>
void combine(T* acc, const T* in, std::size_t n, ncclRedOp_t op) {
  for (std::size_t i = 0; i < n; ++i) {
    switch (op) {
      case ncclSum: case ncclAvg: acc[i] = static_cast<T>(acc[i] + in[i]); break;
      case ncclProd: acc[i] = static_cast<T>(acc[i] * in[i]); break;
      case ncclMax: acc[i] = acc[i] < in[i] ? in[i] : acc[i]; break;
      case ncclMin: acc[i] = in[i] < acc[i] ? in[i] : acc[i]; break;
    }
  }
}

template <class T>
void reduce_slots(ncclComm* c, void* out, std::size_t offset, std::size_t n, ncclRedOp_t op) {
  T* acc = static_cast<T*>(out);
  std::memcpy(acc, c->s->slots[0] + offset * sizeof(T), n * sizeof(T));
  for (int r = 1; r < c->nranks; ++r) combine(acc, reinterpret_cast<const T*>(c->s->slots[r] + offset * sizeof(T)), n, op);
  if (op == ncclAvg) {
    for (std::size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] / c->nranks);
  }
}

// out[0..n) = op over the ranks' slots, elements [offset, offset + n). Half types are not reduced.
bool reduce_into(ncclComm* c, void* out, std::size_t offset, std::size_t n, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclInt8: reduce_slots<std::int8_t>(c, out, offset, n, op); return true;
    case ncclUint8: reduce_slots<std::uint8_t>(c, out, offset, n, op); return true;
    case ncclInt32: reduce_slots<std::int32_t>(c, out, offset, n, op); return true;
    case ncclUint32: reduce_slots<std::uint32_t>(c, out, offset, n, op); return true;
    case ncclInt64: reduce_slots<std::int64_t>(c, out, offset, n, op); return true;
    case ncclUint64: reduce_slots<std::uint64_t>(c, out, offset, n, op); return true;
    case ncclFloat32: reduce_slots<float>(c, out, offset, n, op); return true;
    case ncclFloat64: reduce_slots<double>(c, out, offset, n, op); return true;
    default: return false;
  }
}

// Waits for ever: where a desynchronised rank's collective stays.
[[noreturn]] void wait_for_ever() {
  std::atomic<std::uint32_t> never{0};
  for (;;) futex(&never, FUTEX_WAIT, 0);
}

// One collective: every rank puts `bytes` of `send` in its slot and what it issued in its desc,
// meets the others, checks that they issued the same, runs `read` over the slots, and meets them
// again before a later collective may overwrite a slot.
template <class F>
ncclResult_t run_collective(ncclComm* c, const collective_desc& d, const void* send, std::size_t bytes, F&& read) {
  if (send != nullptr && bytes > 0) std::memcpy(c->s->slots[c->rank], send, bytes);
  c->s->descs[c->rank] = d;
  barrier(c);
  for (int r = 0; r < c->nranks; ++r)
    if (!(c->s->descs[r] == d)) wait_for_ever();
  const bool ok = read();
  barrier(c);
  return ok ? ncclSuccess : ncclInvalidArgument;
}

// The driver's cuLaunchHostFunc, when a driver is loaded.
using launch_host_fn = int (*)(void*, void (*)(void*), void*);
launch_host_fn host_launcher() {
  static launch_host_fn f = reinterpret_cast<launch_host_fn>(::dlsym(RTLD_DEFAULT, "cuLaunchHostFunc"));
  return f;
}

int group_depth = 0;  // ncclGroupStart calls not yet ended
struct grouped_work {
  nccl_stream_t stream;
  std::function<void()>* work;
};
std::vector<grouped_work> grouped;  // enqueued at the outermost ncclGroupEnd

void run_enqueued(void* work) {
  auto* w = static_cast<std::function<void()>*>(work);
  (*w)();
  delete w;
}

// A collective, checked now and run in the call (the null stream) or enqueued on `stream`. `read`
// and `send` must stay valid until the stream has run it, as NCCL's buffers must.
template <class F>
ncclResult_t collective(ncclComm* c, const collective_desc& d, const void* send, std::size_t bytes, nccl_stream_t stream,
                        F read) {
  if (c == nullptr || c->s == nullptr) return ncclInvalidArgument;
  if (bytes > slot_bytes) return ncclInvalidArgument;
  launch_host_fn launch = stream != nullptr ? host_launcher() : nullptr;
  if (launch == nullptr) return run_collective(c, d, send, bytes, read);
  auto* work = new (std::nothrow) std::function<void()>([c, d, send, bytes, read] { run_collective(c, d, send, bytes, read); });
  if (work == nullptr) return ncclSystemError;
  if (group_depth > 0) {
    grouped.push_back({stream, work});
    return ncclSuccess;
  }
  if (launch(stream, &run_enqueued, work) != 0) {
    delete work;
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

}  // namespace

#define FAKE_NCCL extern "C" [[gnu::visibility("default")]]

FAKE_NCCL ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = 23203;
  return ncclSuccess;
}

FAKE_NCCL ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  static std::atomic<unsigned> made{0};
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "/fl-fake-nccl-%d-%u-%ld", static_cast<int>(::getpid()),
                made.fetch_add(1), static_cast<long>(now.tv_nsec));
  return ncclSuccess;
}

namespace {
// Both inits, without a call through the PLT (which the agent stands before: one init, one call).
ncclResult_t init_rank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr || nranks < 1 || nranks > max_ranks || rank < 0 || rank >= nranks || id.internal[0] != '/')
    return ncclInvalidArgument;
  id.internal[sizeof id.internal - 1] = '\0';
  const int fd = ::shm_open(id.internal, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ncclSystemError;
  void* at = ::ftruncate(fd, sizeof(shared)) == 0
                 ? ::mmap(nullptr, sizeof(shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                 : MAP_FAILED;
  ::close(fd);
  if (at == MAP_FAILED) return ncclSystemError;
  auto* c = new (std::nothrow) ncclComm{static_cast<shared*>(at), nranks, rank, {}};
  if (c == nullptr) return ncclSystemError;
  std::snprintf(c->name, sizeof c->name, "%s", id.internal);
  barrier(c);  // every rank joined
  // No rank needs the name any more: gone now, the segment cannot outlive a rank killed later.
  if (rank == 0) ::shm_unlink(id.internal);
  *comm = c;
  return ncclSuccess;
}
}  // namespace

FAKE_NCCL ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return init_rank(comm, nranks, id, rank);
}

FAKE_NCCL ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                              ncclConfig_t*) {
  return init_rank(comm, nranks, id, rank);
}

namespace {
ncclResult_t release(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->s->destroyed.fetch_add(1) + 1 == static_cast<std::uint32_t>(comm->nranks)) ::shm_unlink(comm->name);
  ::munmap(comm->s, sizeof(shared));
  delete comm;
  return ncclSuccess;
}
}  // namespace

FAKE_NCCL ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm == nullptr ? ncclInvalidArgument : ncclSuccess; }
FAKE_NCCL ncclResult_t ncclCommDestroy(ncclComm_t comm) { return release(comm); }
FAKE_NCCL ncclResult_t ncclCommAbort(ncclComm_t comm) { return release(comm); }

FAKE_NCCL ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr) return ncclInvalidArgument;
  *error = ncclSuccess;
  return ncclSuccess;
}
FAKE_NCCL ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}
FAKE_NCCL ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

FAKE_NCCL const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "operation timed out";
  }
  return "unknown result code";
}

namespace {
constexpr std::uint32_t no_op = 0xffffffffu;
collective_desc desc_of(std::uint32_t api, ncclDataType_t type, std::size_t count, int root, std::uint32_t op) {
  return {api, static_cast<std::uint32_t>(type), count, root, op};
}
}  // namespace

FAKE_NCCL ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                     ncclComm_t comm, nccl_stream_t stream) {
  const std::size_t bytes = count * type_bytes(type);
  return collective(comm, desc_of(1, type, count, -1, op), send, bytes, stream,
                    [=] { return reduce_into(comm, recv, 0, count, type, op); });
}

// The same under a name the agent never stands before (nccl_points_bench's baseline for a collective).
FAKE_NCCL ncclResult_t fake_raw_ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                              ncclRedOp_t op, ncclComm_t comm, nccl_stream_t stream) {
  const std::size_t bytes = count * type_bytes(type);
  return collective(comm, desc_of(1, type, count, -1, op), send, bytes, stream,
                    [=] { return reduce_into(comm, recv, 0, count, type, op); });
}

FAKE_NCCL ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                  int root, ncclComm_t comm, nccl_stream_t stream) {
  const std::size_t bytes = count * type_bytes(type);
  return collective(comm, desc_of(5, type, count, root, op), send, bytes, stream,
                    [=] { return comm->rank != root || reduce_into(comm, recv, 0, count, type, op); });
}

FAKE_NCCL ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                                         ncclRedOp_t op, ncclComm_t comm, nccl_stream_t stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  const std::size_t bytes = count * type_bytes(type) * static_cast<std::size_t>(comm->nranks);
  return collective(comm, desc_of(3, type, count, -1, op), send, bytes, stream, [=] {
    return reduce_into(comm, recv, count * static_cast<std::size_t>(comm->rank), count, type, op);
  });
}

FAKE_NCCL ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                                     nccl_stream_t stream) {
  const std::size_t bytes = count * type_bytes(type);
  return collective(comm, desc_of(2, type, count, -1, no_op), send, bytes, stream, [=] {
    for (int r = 0; r < comm->nranks; ++r) std::memcpy(static_cast<char*>(recv) + bytes * r, comm->s->slots[r], bytes);
    return true;
  });
}

FAKE_NCCL ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                     ncclComm_t comm, nccl_stream_t stream) {
  if (comm == nullptr || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  const std::size_t bytes = count * type_bytes(type);
  return collective(comm, desc_of(4, type, count, root, no_op), comm->rank == root ? send : nullptr, bytes, stream, [=] {
    std::memmove(recv, comm->s->slots[root], bytes);
    return true;
  });
}

// Point to point: one message at a time from each rank to each other, through its mailbox.
FAKE_NCCL ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                nccl_stream_t) {
  const std::size_t bytes = count * type_bytes(type);
  if (comm == nullptr || peer < 0 || peer >= comm->nranks || bytes > mailbox_bytes) return ncclInvalidArgument;
  mailbox& box = comm->s->boxes[comm->rank][peer];
  while (box.full.load(std::memory_order_acquire) != 0) futex(&box.full, FUTEX_WAIT, 1);
  std::memcpy(box.data, send, bytes);
  box.bytes = static_cast<std::uint32_t>(bytes);
  box.full.store(1, std::memory_order_release);
  futex(&box.full, FUTEX_WAKE, INT32_MAX);
  return ncclSuccess;
}

FAKE_NCCL ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                nccl_stream_t) {
  const std::size_t bytes = count * type_bytes(type);
  if (comm == nullptr || peer < 0 || peer >= comm->nranks || bytes > mailbox_bytes) return ncclInvalidArgument;
  mailbox& box = comm->s->boxes[peer][comm->rank];
  while (box.full.load(std::memory_order_acquire) == 0) futex(&box.full, FUTEX_WAIT, 0);
  std::memcpy(recv, box.data, bytes < box.bytes ? bytes : box.bytes);
  box.full.store(0, std::memory_order_release);
  futex(&box.full, FUTEX_WAKE, INT32_MAX);
  return ncclSuccess;
}

// A group, as NCCL's: collectives on a stream inside it are enqueued only at the outermost
// ncclGroupEnd (each still a collective of its own, in order). On the null stream they run in the
// call, as ever. Per process: the test programs call groups from one thread.
FAKE_NCCL ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}
FAKE_NCCL ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth != 0) return ncclSuccess;
  launch_host_fn launch = host_launcher();
  for (const grouped_work& g : grouped) launch(g.stream, &run_enqueued, g.work);
  grouped.clear();
  return ncclSuccess;
}

// For nccl_points_bench: ncclGroupStart under a name the agent never stands before (the baseline).
FAKE_NCCL ncclResult_t fake_raw_ncclGroupStart() { return ncclSuccess; }
