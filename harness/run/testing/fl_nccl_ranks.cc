// fl_nccl_ranks MODE: two "ranks" of a distributed job that hangs, for the runner's distributed
// verdict (harness/run/nccl_ranks.h) without NCCL or the agent. The parent forks rank 0 and
// rank 1; each fills its own $FAULTLINE_RUN_DIR/nccl.PID as the preloaded agent would
// (faults/preload/nccl_state.h: mapped shared, magic stored last), then:
//   stopped  rank 0 issued 3 all-reduces and waits inside the third; rank 1 issued 2 and a
//            point stopped it before its third (SIGSTOP), as nccl/ncclAllReduce=stop would.
//   killed   rank 0 issued 5 and waits inside the fifth; rank 1 issued 4 and a point killed it
//            before its fifth (SIGKILL), as nccl/ncclAllReduce=kill would.
// Rank 0 and the parent block until the runner's timeout.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "faults/preload/nccl_state.h"

namespace {

using faultline::agent::nccl_api;
using faultline::agent::nccl_fault_action;
using faultline::agent::nccl_rank_state;

constexpr std::uint32_t id(nccl_api a) { return static_cast<std::uint32_t>(a); }

// The agent's file, created and mapped; nullptr (and a message) when it cannot be.
nccl_rank_state* map_state() {
  const char* dir = std::getenv("FAULTLINE_RUN_DIR");
  if (!dir) {
    std::fprintf(stderr, "fl_nccl_ranks: FAULTLINE_RUN_DIR is not set\n");
    return nullptr;
  }
  const std::string path = std::string(dir) + "/" + faultline::agent::nccl_file_prefix + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::ftruncate(fd, sizeof(nccl_rank_state)) != 0) {
    std::perror(path.c_str());
    return nullptr;
  }
  void* p = ::mmap(nullptr, sizeof(nccl_rank_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<nccl_rank_state*>(p);
}

// A rank after `collectives` all-reduces and one init, as the agent leaves it (each in the ring,
// on one communicator); magic last.
void fill(nccl_rank_state* s, int rank, std::uint32_t collectives) {
  s->version = faultline::agent::nccl_state_version;
  s->pid = ::getpid();
  s->rank = rank;
  s->nranks = 2;
  s->local_rank = rank;
  s->comms = 1;
  s->comm_count = 1;
  s->comm_table[0] = {0x5eed, 0x1000, 2, rank, collectives, 0};
  for (std::uint32_t seq = 1; seq <= collectives; ++seq) {
    auto& e = s->ring[seq % faultline::agent::nccl_ring_size];
    e = {64, 0x5eed, seq, seq, id(nccl_api::all_reduce), 7, -1, 0};
  }
  s->collectives = collectives;
  s->last_collective = id(nccl_api::all_reduce);
  s->calls[id(nccl_api::comm_init_rank)] = 1;
  s->calls[id(nccl_api::all_reduce)] = collectives;
  std::atomic_thread_fence(std::memory_order_release);
  s->magic = faultline::agent::nccl_state_magic;
}

[[noreturn]] void rank0(std::uint32_t collectives) {
  nccl_rank_state* s = map_state();
  if (!s) std::_Exit(2);
  fill(s, 0, collectives);
  s->in_call = id(nccl_api::all_reduce);  // waiting inside its last all-reduce
  for (;;) ::pause();
}

[[noreturn]] void rank1(bool kill) {
  nccl_rank_state* s = map_state();
  if (!s) std::_Exit(2);
  const std::uint32_t done = kill ? 4 : 2;
  fill(s, 1, done);
  s->calls[id(nccl_api::all_reduce)] = done + 1;  // the next call, counted before the point acts
  s->fault_api = id(nccl_api::all_reduce);
  s->fault_call = done + 1;
  s->fault_signal = kill ? SIGKILL : SIGSTOP;
  s->fault_action = static_cast<std::uint32_t>(kill ? nccl_fault_action::killed : nccl_fault_action::stopped);
  ::raise(kill ? SIGKILL : SIGSTOP);
  for (;;) ::pause();  // a stopped rank that is continued waits like one that never was
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "stopped" && mode != "killed") {
    std::fprintf(stderr, "usage: fl_nccl_ranks stopped|killed\n");
    return 2;
  }
  const bool kill = mode == "killed";
  if (::fork() == 0) rank0(kill ? 5 : 3);
  if (::fork() == 0) rank1(kill);
  for (;;) {
    if (::wait(nullptr) < 0 && errno == ECHILD) ::pause();
  }
}
