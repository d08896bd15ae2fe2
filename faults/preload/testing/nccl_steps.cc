// fl_nccl_steps: an FSDP-like NCCL program on streams, for the distributed verdict's tests against
// the stand-in libnccl.so.2 and the stand-in driver (fake_libnccl.cc, fake_libcuda.cc), where a
// collective is enqueued on a stream and completes only once every rank has reached it. Each
// step, as a sharded data-parallel step does: an all-gather of the parameters, a reduce-scatter of
// the gradients, and every K-th step a broadcast from rank 0; then the rank waits for its stream
// (cuStreamSynchronize) and checks every result. A rank whose peer is missing therefore issues
// the rest of its step and waits in the synchronize, not in a collective, as under PyTorch.
//
//   fl_nccl_steps [--nranks N] [--steps N] [--every K] [--count N] [--desync RANK:STEP] [--hold]
//                 [--grouped]
//
// --desync R:S  rank R skips the broadcast of step S (a planted desync: at that collective's number
//               the others issue ncclBroadcast and R the next step's ncclAllGather).
// --grouped     each step's collectives inside ncclGroupStart/ncclGroupEnd (NCCL, and the
//               stand-in, enqueue them only at the ncclGroupEnd), as PyTorch coalesces them.
// --hold        after the last step every rank waits for ever, its work complete (the runner's
//               question at the deadline must find every collective complete).
// The parent forks the ranks (RANK, LOCAL_RANK, WORLD_SIZE set in each) and waits as a launcher
// does: the first rank that fails or dies stops the others. On SIGTERM it forwards it to the
// ranks and calls exit(143), as torchrun does, so its own phase is then "exit". Exit status 0 when
// every rank did its steps; a rank's failure is "rank R: WHAT failed: <error string>", exit 1.
// CPU only: its streams and buffers are the stand-ins'; on GPUs the same program is
// testing/torch_fsdp_steps.py.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "faults/preload/nccl_api.h"

// The driver's stream functions (CUresult is an int, CUstream a pointer).
extern "C" int cuStreamCreate(void** stream, unsigned flags);
extern "C" int cuStreamSynchronize(void* stream);
extern "C" int cuStreamDestroy_v2(void* stream);

namespace {

struct options {
  int nranks = 4;
  int steps = 6;
  int every = 3;
  std::size_t count = 64;
  int desync_rank = -1;
  int desync_step = -1;
  bool hold = false;
  bool grouped = false;
};

bool parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--nranks" && v) o.nranks = std::atoi(argv[++i]);
    else if (a == "--steps" && v) o.steps = std::atoi(argv[++i]);
    else if (a == "--every" && v) o.every = std::atoi(argv[++i]);
    else if (a == "--count" && v) o.count = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--desync" && v) {
      if (std::sscanf(argv[++i], "%d:%d", &o.desync_rank, &o.desync_step) != 2) return false;
    } else if (a == "--hold") o.hold = true;
    else if (a == "--grouped") o.grouped = true;
    else return false;
  }
  return o.nranks >= 1 && o.nranks <= 8 && o.steps >= 0 && o.every >= 1 && o.count >= 1 && o.count <= 4096;
}

int fail(int rank, const char* what, ncclResult_t r) {
  std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, ncclGetErrorString(r));
  return 1;
}

int run_rank(const options& o, int rank, int id_fd, const std::vector<int>& out_fds) {
  ncclUniqueId id{};
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return fail(rank, "ncclGetUniqueId", r);
    for (int fd : out_fds)
      if (::write(fd, &id, sizeof id) != static_cast<ssize_t>(sizeof id)) return 1;
  } else if (::read(id_fd, &id, sizeof id) != static_cast<ssize_t>(sizeof id)) {
    std::fprintf(stderr, "rank %d: no unique id from rank 0\n", rank);
    return 1;
  }
  void* stream = nullptr;
  if (cuStreamCreate(&stream, 0) != 0) {
    std::fprintf(stderr, "rank %d: cuStreamCreate failed\n", rank);
    return 1;
  }
  ncclComm_t comm = nullptr;
  if (ncclResult_t r = ncclCommInitRankConfig(&comm, o.nranks, id, rank, nullptr); r != ncclSuccess)
    return fail(rank, "ncclCommInitRankConfig", r);
  const std::size_t n = o.count, world = static_cast<std::size_t>(o.nranks);
  std::vector<float> shard(n), params(n * world), grads(n * world), reduced(n), bcast(n);
  auto* s = static_cast<nccl_stream_t>(stream);
  for (int step = 1; step <= o.steps; ++step) {
    for (auto& x : shard) x = static_cast<float>(rank + step);
    for (auto& x : grads) x = static_cast<float>(rank + 1);
    for (auto& x : bcast) x = static_cast<float>(rank == 0 ? 100 + step : -1);
    if (o.grouped) ncclGroupStart();
    if (ncclResult_t r = ncclAllGather(shard.data(), params.data(), n, ncclFloat, comm, s); r != ncclSuccess)
      return fail(rank, "ncclAllGather", r);
    if (ncclResult_t r = ncclReduceScatter(grads.data(), reduced.data(), n, ncclFloat, ncclSum, comm, s); r != ncclSuccess)
      return fail(rank, "ncclReduceScatter", r);
    const bool broadcast = step % o.every == 0 && !(rank == o.desync_rank && step == o.desync_step);
    if (broadcast) {
      if (ncclResult_t r = ncclBroadcast(bcast.data(), bcast.data(), n, ncclFloat, 0, comm, s); r != ncclSuccess)
        return fail(rank, "ncclBroadcast", r);
    }
    if (o.grouped) {
      if (ncclResult_t r = ncclGroupEnd(); r != ncclSuccess) return fail(rank, "ncclGroupEnd", r);
    }
    if (cuStreamSynchronize(stream) != 0) return 1;
    for (std::size_t r = 0; r < world; ++r) {
      if (params[r * n] != static_cast<float>(r + step)) {
        std::fprintf(stderr, "rank %d: step %d: all-gather gave %g from rank %zu\n", rank, step, params[r * n], r);
        return 1;
      }
    }
    if (reduced[0] != static_cast<float>(world * (world + 1) / 2)) {
      std::fprintf(stderr, "rank %d: step %d: reduce-scatter gave %g\n", rank, step, reduced[0]);
      return 1;
    }
    if (broadcast && bcast[n - 1] != static_cast<float>(100 + step)) {
      std::fprintf(stderr, "rank %d: step %d: broadcast gave %g\n", rank, step, bcast[n - 1]);
      return 1;
    }
  }
  if (o.hold) {
    std::printf("rank %d: %d steps done, holding\n", rank, o.steps);
    std::fflush(stdout);
    for (;;) ::pause();
  }
  if (ncclResult_t r = ncclCommDestroy(comm); r != ncclSuccess) return fail(rank, "ncclCommDestroy", r);
  cuStreamDestroy_v2(stream);
  std::printf("rank %d: %d steps OK\n", rank, o.steps);
  return 0;
}

volatile sig_atomic_t terminated = 0;
void on_term(int) { terminated = 1; }

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: %s [--nranks 1-8] [--steps N] [--every K] [--count 1-4096] [--desync RANK:STEP] [--hold] "
                 "[--grouped]\n",
                 argv[0]);
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
      const int status = run_rank(o, r, read_ends[r], r == 0 ? outs : std::vector<int>{});
      std::fflush(nullptr);
      std::exit(status);
    }
    pids.push_back(pid);
  }
  struct sigaction term {};
  term.sa_handler = &on_term;  // no SA_RESTART: waitpid returns EINTR
  ::sigaction(SIGTERM, &term, nullptr);
  int failed = 0;
  for (std::size_t left = pids.size(); left > 0;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (terminated) {
      for (pid_t other : pids)
        if (other > 0) ::kill(other, SIGTERM);
      std::fprintf(stderr, "terminated: stopping the ranks\n");
      std::exit(143);
    }
    if (pid < 0) continue;
    int r = 0;
    while (r < o.nranks && pids[r] != pid) ++r;
    if (r == o.nranks) continue;
    --left;
    pids[r] = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (WIFSIGNALED(status))
      std::fprintf(stderr, "rank %d (pid %d) killed by signal %d\n", r, static_cast<int>(pid), WTERMSIG(status));
    else
      std::fprintf(stderr, "rank %d (pid %d) exited %d\n", r, static_cast<int>(pid), WEXITSTATUS(status));
    if (!failed) {
      for (pid_t other : pids)
        if (other > 0) ::kill(other, SIGKILL);
    }
    failed = 1;
  }
  return failed;
}
