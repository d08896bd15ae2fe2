// A plain NCCL program: N ranks, one process each, an allreduce in a loop. The nccl/ points'
// tests run it against the stand-in libnccl.so.2 (fake_libnccl.cc, host memory) and
// ci/gpu/nccl-run.sh against the real one on GPUs (--memory device), unchanged: it is linked
// against libnccl.so.2 by its soname, so LD_LIBRARY_PATH picks the library. Built a second time
// as fl_nccl_allreduce_dlopen (FL_NCCL_DLOPEN): the library is then dlopen()ed and every function
// taken from dlsym(handle, ...), as Python bindings and plugin loaders do; and a third time as a
// library (FL_NCCL_PLUGIN, libfl_nccl_allreduce_plugin.so) that fl_nccl_allreduce_local dlopen()s
// RTLD_LOCAL, so that libnccl is loaded outside the global scope, as under PyTorch.
//
//   fl_nccl_allreduce [--nranks N] [--iters N] [--count N] [--memory host|device]
//
// The parent forks the ranks (RANK, LOCAL_RANK and WORLD_SIZE set in each, as a launcher sets
// them); rank 0 makes the unique id and hands it to the others through pipes. Each rank inits its
// communicator (device mode: on GPU rank % devices), runs the allreduces checking every sum, and
// destroys it. A failed NCCL call is this program's own error path: "rank R: ncclX failed: <its
// error string>", exit 1. The parent exits 0 when every rank did, else 1, naming each rank that
// failed or died by a signal.
#include <dlfcn.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "faults/preload/nccl_api.h"

#if FL_NCCL_DEVICE
#include <cuda_runtime_api.h>
#endif

namespace {

struct options {
  int nranks = 2;
  int iters = 5;
  std::size_t count = 1024;
  bool device = false;
};

// The NCCL functions used, linked or from dlsym.
struct nccl_functions {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) init_rank = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

bool load(nccl_functions& f) {
#if FL_NCCL_DLOPEN
  void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "cannot load libnccl.so.2: %s\n", ::dlerror());
    return false;
  }
  f.get_unique_id = reinterpret_cast<decltype(f.get_unique_id)>(::dlsym(lib, "ncclGetUniqueId"));
  f.init_rank = reinterpret_cast<decltype(f.init_rank)>(::dlsym(lib, "ncclCommInitRank"));
  f.all_reduce = reinterpret_cast<decltype(f.all_reduce)>(::dlsym(lib, "ncclAllReduce"));
  f.destroy = reinterpret_cast<decltype(f.destroy)>(::dlsym(lib, "ncclCommDestroy"));
  f.error_string = reinterpret_cast<decltype(f.error_string)>(::dlsym(lib, "ncclGetErrorString"));
  return f.get_unique_id && f.init_rank && f.all_reduce && f.destroy && f.error_string;
#else
  f = {&ncclGetUniqueId, &ncclCommInitRank, &ncclAllReduce, &ncclCommDestroy, &ncclGetErrorString};
  return true;
#endif
}

bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--nranks" && v) o.nranks = std::atoi(argv[++i]);
    else if (a == "--iters" && v) o.iters = std::atoi(argv[++i]);
    else if (a == "--count" && v) o.count = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--memory" && v) o.device = std::strcmp(argv[++i], "device") == 0;
    else return false;
  }
#if !FL_NCCL_DEVICE
  if (o.device) {
    std::fprintf(stderr, "built without the CUDA runtime: --memory device is not available\n");
    return false;
  }
#endif
  return o.nranks >= 1 && o.nranks <= 8 && o.iters >= 0 && o.count >= 1;
}

int fail(int rank, const char* what, ncclResult_t r, const nccl_functions& f) {
  std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, f.error_string(r));
  return 1;
}

// The buffers of one rank: host memory, or device memory with a stream.
struct buffers {
  float* data = nullptr;
  void* stream = nullptr;
  std::vector<float> host;

  bool make(const options& o, int rank) {
    host.assign(o.count, 0.0f);
    if (!o.device) {
      data = host.data();
      return true;
    }
#if FL_NCCL_DEVICE
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return false;
    cudaStream_t s = nullptr;
    if (cudaSetDevice(rank % devices) != cudaSuccess || cudaMalloc(reinterpret_cast<void**>(&data), o.count * sizeof(float)) != cudaSuccess ||
        cudaStreamCreate(&s) != cudaSuccess)
      return false;
    stream = s;
    return true;
#else
    (void)rank;
    return false;
#endif
  }
  bool put() {
#if FL_NCCL_DEVICE
    if (stream != nullptr) return cudaMemcpy(data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
#endif
    return true;
  }
  // Waits for the collective (on a device: the stream, where a rank waits for a missing peer).
  bool get() {
#if FL_NCCL_DEVICE
    if (stream != nullptr) {
      return cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) == cudaSuccess &&
             cudaMemcpy(host.data(), data, host.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
    }
#endif
    return true;
  }
};

int run_rank(const options& o, int rank, int id_fd, const std::vector<int>& out_fds, const nccl_functions& f) {
  ncclUniqueId id{};
  if (rank == 0) {
    if (ncclResult_t r = f.get_unique_id(&id); r != ncclSuccess) return fail(rank, "ncclGetUniqueId", r, f);
    for (int fd : out_fds) {
      if (::write(fd, &id, sizeof id) != static_cast<ssize_t>(sizeof id)) return 1;
    }
  } else if (::read(id_fd, &id, sizeof id) != static_cast<ssize_t>(sizeof id)) {
    std::fprintf(stderr, "rank %d: no unique id from rank 0\n", rank);
    return 1;
  }
  buffers b;
  if (!b.make(o, rank)) {
    std::fprintf(stderr, "rank %d: cannot set up %s memory\n", rank, o.device ? "device" : "host");
    return 1;
  }
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = f.init_rank(&comm, o.nranks, id, rank); r != ncclSuccess) return fail(rank, "ncclCommInitRank", r, f);
  for (int it = 0; it < o.iters; ++it) {
    for (std::size_t i = 0; i < o.count; ++i) b.host[i] = static_cast<float>(rank + 1 + it);
    if (!b.put()) return 1;
    auto stream = static_cast<nccl_stream_t>(b.stream);
    if (ncclResult_t r = f.all_reduce(b.data, b.data, o.count, ncclFloat, ncclSum, comm, stream); r != ncclSuccess)
      return fail(rank, "ncclAllReduce", r, f);
    if (!b.get()) return 1;
    const float want = static_cast<float>(o.nranks * (o.nranks + 1) / 2 + o.nranks * it);
    if (b.host[0] != want || b.host[o.count - 1] != want) {
      std::fprintf(stderr, "rank %d: allreduce %d gave %g, not %g\n", rank, it + 1, b.host[0], want);
      return 1;
    }
  }
  if (ncclResult_t r = f.destroy(comm); r != ncclSuccess) return fail(rank, "ncclCommDestroy", r, f);
  std::printf("rank %d: %d allreduces of %zu floats OK\n", rank, o.iters, o.count);
  return 0;
}

}  // namespace

#if FL_NCCL_PLUGIN
// Built as a library that a loader dlopen()s RTLD_LOCAL (nccl_allreduce_loader.cc), as Python
// loads libtorch_cuda.so: libnccl.so.2 then comes in as its dependency, outside the global scope.
extern "C" [[gnu::visibility("default")]] int fl_nccl_allreduce_main(int argc, char** argv) {
#else
int main(int argc, char** argv) {
#endif
  options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: %s [--nranks 1-8] [--iters N] [--count N] [--memory host|device]\n", argv[0]);
    return 2;
  }
  std::vector<int> read_ends(o.nranks, -1), write_ends(o.nranks, -1);
  for (int r = 1; r < o.nranks; ++r) {
    int p[2];
    if (::pipe(p) != 0) return 1;
    read_ends[r] = p[0];
    write_ends[r] = p[1];
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < o.nranks; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      const std::string rank = std::to_string(r), world = std::to_string(o.nranks);
      ::setenv("RANK", rank.c_str(), 1);
      ::setenv("LOCAL_RANK", rank.c_str(), 1);
      ::setenv("WORLD_SIZE", world.c_str(), 1);
      std::vector<int> outs(write_ends.begin() + 1, write_ends.end());
      nccl_functions f;
      const int status = load(f) ? run_rank(o, r, read_ends[r], r == 0 ? outs : std::vector<int>{}, f) : 1;
      std::fflush(nullptr);
      std::exit(status);
    }
    pids.push_back(pid);
  }
  // As a launcher does: the first rank that fails or dies stops the others (a rank left waiting
  // for a dead peer would wait for ever). A stopped rank is not an end: the others then wait.
  int failed = 0;
  for (std::size_t left = pids.size(); left > 0;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) continue;
    int r = 0;
    while (r < o.nranks && pids[r] != pid) ++r;
    if (r == o.nranks) continue;
    --left;
    pids[r] = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "rank %d (pid %d) killed by signal %d (%s)\n", r, static_cast<int>(pid), WTERMSIG(status),
                   strsignal(WTERMSIG(status)));
    } else {
      std::fprintf(stderr, "rank %d (pid %d) exited %d\n", r, static_cast<int>(pid), WEXITSTATUS(status));
    }
    if (!failed) {
      for (pid_t other : pids) {
        if (other > 0) ::kill(other, SIGKILL);
      }
      if (left > 0) std::fprintf(stderr, "stopping the other ranks\n");
    }
    failed = 1;
  }
  return failed;
}
