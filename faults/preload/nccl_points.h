// nccl/<API> fault points for any program (nccl_points.cc): the preloaded agent stands before the
// NCCL calls of a program that never knew faultline, and keeps each rank's NCCL state
// (nccl_state.h, nccl.PID) from which the runner names the ranks of a hung distributed run.
//
//   nccl/<function>[@rank=N]   ncclAllReduce, ncclAllGather, ncclReduceScatter, ncclBroadcast,
//                              ncclReduce, ncclSend, ncclRecv, ncclGroupStart, ncclGroupEnd,
//                              ncclCommInitRank, ncclCommInitRankConfig, ncclCommFinalize,
//                              ncclCommAbort, ncclCommDestroy (faults/nccl_names.h): delay, stop,
//                              kill, abort, print, and fail(<ncclResult_t name> | N) — the call is
//                              not made and answers that result. @rank=N acts only in the process
//                              whose rank is N: the `rank` of its first ncclCommInitRank(Config),
//                              and before that RANK (else LOCAL_RANK) from the environment.
//
// How a call is reached. The agent exports those functions (preload.map), so a program or library
// linked against libnccl.so.2 (PyTorch's libtorch_cuda.so through the nvidia-nccl wheel) binds
// its calls to the agent's, which go on to libnccl's own (the next definition). A program that
// dlopen()s libnccl and asks dlsym(handle, ...) for a function gets the agent's too: the agent's
// dlsym (cuda_points.cc) hands it out and remembers libnccl's. A program linked statically against
// NCCL is not reached. x86-64 and glibc, as the rest of the preload.
//
// Unused (no nccl/ item), a call costs the counts of nccl_state.h (a few stores to a mapped page)
// and an indirect jump; a collective also its ring entry and, with a CUDA driver, an event
// recorded on its stream and usually one queried: nccl_points_bench.
#pragma once

namespace faultline::agent::nccl_points {

/// Reads the nccl/ items of FAULTLINE_FAULTS (`spec`, copied; null or empty: none) and registers
/// the fork handler (a child keeps a state of its own). Called once, from the preload's
/// constructor. True when an item may reach an nccl/ point.
bool install(const char* spec) noexcept;

/// exit(`status`) was called (the agent's interposed exit): written into the rank's state when the
/// process has one, so that a rank's verdict says how it ended ("then exited 1").
void note_exit(int status) noexcept;

/// The agent's dlsym found `real` for `name` in a library: the agent's own function when `name`
/// is one of the NCCL functions above and `real` is in libnccl (`real` is then what that function
/// calls), else nullptr.
void* wrap_dlsym(const char* name, void* real) noexcept;

}  // namespace faultline::agent::nccl_points
