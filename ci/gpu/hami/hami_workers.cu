// hami_workers: several processes allocating on one GPU at once, for HAMi-core's shared region
// (issue 18's check of the lock/ and fn/ points on a real library). Run under
// LD_PRELOAD=libvgpu.so with CUDA_DEVICE_MEMORY_SHARED_CACHE naming one region file per run:
// every worker registers in the region when its context starts (HAMi-core's lock_shrreg) and
// updates its usage on every allocation (add_gpu_device_memory_usage), reading every other
// worker's usage first (the memory limit's check). Nothing here knows of faultline or HAMi-core.
//
//   hami_workers [--procs N] [--seconds S] [--mib M] [--stall-s T] [--entry-points]
//
// Every CUDA call goes through the runtime (cudart: static as nvcc links it by default, or shared
// with `nvcc -cudart shared`, as hami-carry.sh builds hami_workers_shared), the way HAMi-core's
// users' programs call CUDA: the runtime finds the driver's functions through dlsym and
// cuGetProcAddress, which HAMi-core's dlsym hook answers. --entry-points: each worker prints,
// once its context exists, which module the runtime's driver entry points resolve into
// (cudaGetDriverEntryPointByVersion, then dladdr): "entry cuInit libvgpu.so" when HAMi-core's own
// functions stand there, "libcuda.so.1" when the driver's do (issue 39, item 4: the record says
// which entry points the worker's calls go through).
//
// The parent starts N workers (itself, exec'd with --worker), reaps each as it ends (a killed
// worker is never left a zombie, which a liveness check could read as alive), and prints how each
// ended. A worker makes its context, then allocates and frees M MiB for S seconds, and prints the
// time its context took and its longest allocation. A worker that waited T seconds or more for
// either says so on stderr and exits 3. The parent exits 3 when a worker stalled, 1 when one
// failed otherwise (a CUDA error, a signal other than SIGKILL), else 0: a worker killed by SIGKILL
// (a fault point's kill) is not a failure of this program; what it leaves behind for the others is
// what is measured.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  int procs = 4;
  double seconds = 2.0;
  std::size_t mib = 64;
  double stall_s = 5.0;
  bool worker = false;
  bool entry_points = false;
};

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--worker") {
      o.worker = true;
    } else if (a == "--procs" && has_value) {
      o.procs = std::atoi(argv[++i]);
    } else if (a == "--seconds" && has_value) {
      o.seconds = std::atof(argv[++i]);
    } else if (a == "--mib" && has_value) {
      o.mib = static_cast<std::size_t>(std::atol(argv[++i]));
    } else if (a == "--stall-s" && has_value) {
      o.stall_s = std::atof(argv[++i]);
    } else if (a == "--entry-points") {
      o.entry_points = true;
    } else {
      std::fprintf(stderr, "hami_workers: unknown or incomplete argument '%s'\n", a.c_str());
      return false;
    }
  }
  if (o.procs < 1 || o.procs > 64 || o.seconds <= 0 || o.mib == 0 || o.stall_s <= 0) {
    std::fprintf(stderr, "hami_workers: --procs 1..64, --seconds, --mib and --stall-s > 0\n");
    return false;
  }
  return true;
}

int work(const options& o) {
  const auto start = clock_type::now();
  cudaError_t e = cudaFree(nullptr);  // the context: HAMi-core registers this process here
  const double init_s = seconds_since(start);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "hami_workers: worker %d: context: %s\n", getpid(), cudaGetErrorName(e));
    return 1;
  }
  if (o.entry_points) {
    // Where the runtime's calls land: the module of each driver entry point it would use, and of
    // what a plain dlsym(RTLD_DEFAULT) finds (the symbol a program linked to libcuda binds to).
    for (const char* name : {"cuInit", "cuGetProcAddress", "cuMemAlloc_v2", "cuMemFree_v2", "cuDevicePrimaryCtxRetain"}) {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult status{};
      const cudaError_t r = cudaGetDriverEntryPointByVersion(name, &fn, CUDART_VERSION, cudaEnableDefault, &status);
      Dl_info info{}, plain{};
      const bool named = r == cudaSuccess && fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fname != nullptr;
      void* bound = dlsym(RTLD_DEFAULT, name);
      const bool bound_named = bound != nullptr && dladdr(bound, &plain) != 0 && plain.dli_fname != nullptr;
      const char* module = named ? std::strrchr(info.dli_fname, '/') : nullptr;
      const char* bound_module = bound_named ? std::strrchr(plain.dli_fname, '/') : nullptr;
      std::printf("worker %d: entry %s runtime=%s dlsym=%s\n", getpid(), name,
                  named ? (module != nullptr ? module + 1 : info.dli_fname) : (r == cudaSuccess ? "none" : cudaGetErrorName(r)),
                  bound_named ? (bound_module != nullptr ? bound_module + 1 : plain.dli_fname) : "none");
    }
    std::fflush(stdout);
  }
  double longest = 0;
  long allocations = 0;
  const auto loop = clock_type::now();
  while (seconds_since(loop) < o.seconds) {
    const auto t = clock_type::now();
    void* p = nullptr;
    e = cudaMalloc(&p, o.mib << 20);
    if (e == cudaSuccess) e = cudaFree(p);
    const double took = seconds_since(t);
    if (took > longest) longest = took;
    if (e != cudaSuccess) {
      std::fprintf(stderr, "hami_workers: worker %d: allocation %ld: %s\n", getpid(), allocations,
                   cudaGetErrorName(e));
      return 1;
    }
    ++allocations;
  }
  std::printf("worker %d: context %.3f s, %ld allocations, longest %.3f s\n", getpid(), init_s, allocations,
              longest);
  std::fflush(stdout);
  if (init_s >= o.stall_s || longest >= o.stall_s) {
    std::fprintf(stderr, "hami_workers: worker %d stalled %.1f s in %s\n", getpid(),
                 init_s >= longest ? init_s : longest, init_s >= longest ? "its context" : "an allocation");
    return 3;
  }
  return 0;
}

int parent(const options& o, char** argv) {
  std::vector<pid_t> workers;
  const std::string procs = std::to_string(o.procs), seconds = std::to_string(o.seconds),
                    mib = std::to_string(o.mib), stall = std::to_string(o.stall_s);
  for (int i = 0; i < o.procs; ++i) {
    const char* args[] = {argv[0],     "--worker",    "--seconds", seconds.c_str(), "--mib", mib.c_str(),
                          "--stall-s", stall.c_str(), o.entry_points ? "--entry-points" : nullptr, nullptr};
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, const_cast<char**>(args), environ);
    if (rc != 0) {
      std::fprintf(stderr, "hami_workers: cannot start worker %d: %s\n", i, std::strerror(rc));
      return 1;
    }
    workers.push_back(pid);
  }
  int result = 0, killed = 0, stalled = 0;
  for (std::size_t left = workers.size(); left > 0; --left) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      std::perror("hami_workers: waitpid");
      return 1;
    }
    if (WIFEXITED(status)) {
      std::printf("worker %d exited %d\n", pid, WEXITSTATUS(status));
      if (WEXITSTATUS(status) == 3) {
        ++stalled;
        result = 3;
      } else if (WEXITSTATUS(status) != 0 && result == 0) {
        result = 1;
      }
    } else if (WIFSIGNALED(status)) {
      std::printf("worker %d killed by signal %d\n", pid, WTERMSIG(status));
      if (WTERMSIG(status) == SIGKILL) {
        ++killed;
      } else if (result == 0) {
        result = 1;
      }
    }
    std::fflush(stdout);
  }
  std::printf("hami_workers: %d workers, %d killed, %d stalled\n", o.procs, killed, stalled);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (!parse(argc, argv, o)) return 2;
  return o.worker ? work(o) : parent(o, argv);
}
