// A rank's NCCL state (protocol.h, "nccl.PID"): what the preloaded agent keeps, per process, about
// the NCCL calls the program made, so that the runner can say after a hang which ranks were in a
// collective and which were not.
//
// NCCL's collectives are asynchronous: ncclAllReduce enqueues work on a stream and returns, and a
// rank whose peer never joins waits later, in a stream or event synchronize or in the framework's
// own wait. So "inside the collective" cannot be read from the stack alone. What tells the ranks
// apart is the count of collectives each one issued (as PyTorch's flight recorder compares
// sequence numbers): the ranks at the highest count issued that collective and wait for the
// others; a rank below it never reached it.
//
// The file: $FAULTLINE_RUN_DIR/nccl.PID, created by the agent at the first NCCL call it stands
// before (never in a process that makes none), sized to sizeof(nccl_rank_state) and mapped shared,
// so that each call is a few stores to memory, not a system call. The fields are updated with
// relaxed atomic stores, `calls[]` and `collectives` before `in_call`; the runner reads the file
// after the run's processes have stopped or been killed (a mapping of a file outlives its process).
// Native byte order: writer and reader are on one machine.
#pragma once

#include <cstdint>
#include <string_view>

#include "faults/nccl_names.h"

namespace faultline::agent {

inline constexpr const char* nccl_file_prefix = "nccl.";
inline constexpr std::uint32_t nccl_state_magic = 0x434e4c46;  // "FLNC"
inline constexpr std::uint32_t nccl_state_version = 1;

/// The NCCL functions the agent stands before, in a fixed order (the index is the id stored in
/// nccl_rank_state). nccl_none (0) means no call.
enum class nccl_api : std::uint32_t {
  none = 0,
  all_reduce,           // ncclAllReduce
  all_gather,           // ncclAllGather
  reduce_scatter,       // ncclReduceScatter
  broadcast,            // ncclBroadcast
  reduce,               // ncclReduce
  send,                 // ncclSend
  recv,                 // ncclRecv
  group_start,          // ncclGroupStart
  group_end,            // ncclGroupEnd
  comm_init_rank,       // ncclCommInitRank
  comm_init_rank_config,  // ncclCommInitRankConfig
  comm_finalize,        // ncclCommFinalize
  comm_abort,           // ncclCommAbort
  comm_destroy,         // ncclCommDestroy
  count
};

inline constexpr std::uint32_t nccl_api_count = static_cast<std::uint32_t>(nccl_api::count);

/// The exported name of an API ("ncclAllReduce"), "" for none or out of range.
inline constexpr std::string_view nccl_api_name(std::uint32_t id) noexcept {
  return id < nccl_api_count ? faults::nccl_function_names[id] : std::string_view{};
}
static_assert(faults::nccl_function_count == nccl_api_count, "faults/nccl_names.h lists every nccl_api");

/// Whether a call of `id` counts as a collective (and so in nccl_rank_state::collectives): the
/// five collectives, not point-to-point, group or communicator calls.
inline constexpr bool nccl_api_is_collective(std::uint32_t id) noexcept {
  return id >= static_cast<std::uint32_t>(nccl_api::all_reduce) &&
         id <= static_cast<std::uint32_t>(nccl_api::reduce);
}

/// What a fault point did to the rank (nccl_rank_state::fault_action).
enum class nccl_fault_action : std::uint32_t {
  none = 0,
  stopped,  // `stop`: the rank stopped itself (SIGSTOP) before the call `fault_api` #`fault_call`
  killed,   // `kill`: the rank sent itself SIGKILL there (fault_signal = 9)
  aborted,  // `abort`: abort() there (fault_signal = SIGABRT)
  failed,   // `fail`: the call was not made and answered fault_result
  delayed,  // `delay`: the call was made late
};

struct nccl_rank_state {
  std::uint32_t magic;    // nccl_state_magic, stored last when the file is first filled in
  std::uint32_t version;  // nccl_state_version
  std::int32_t pid;
  /// The rank: the `rank` argument of the first ncclCommInitRank(Config) this process made, or
  /// before that RANK (else LOCAL_RANK) from the environment; -1 while unknown.
  std::int32_t rank;
  std::int32_t nranks;      // that init's nranks (or WORLD_SIZE), -1 while unknown
  std::int32_t local_rank;  // LOCAL_RANK from the environment, -1 without it
  /// Communicators initialised so far (calls of ncclCommInitRank(Config) that returned success).
  std::uint32_t comms;
  /// Collectives issued (calls of the five collectives that were made, whatever they returned):
  /// the rank's sequence number.
  std::uint32_t collectives;
  /// The id of the last collective issued (nccl_api), 0 before the first.
  std::uint32_t last_collective;
  /// The id of the call the rank is inside right now (entered, not returned), 0 when none.
  std::uint32_t in_call;
  /// Per API: calls entered (counted before the call is made or a point acts on it).
  std::uint32_t calls[nccl_api_count];
  /// What a fault point did, and before which call: `fault_api` call number `fault_call`
  /// (1-based: the value calls[fault_api] had once that call was counted).
  std::uint32_t fault_action;  // nccl_fault_action
  std::uint32_t fault_api;
  std::uint32_t fault_call;
  std::int32_t fault_signal;   // the signal a stop/kill/abort sent, 0 otherwise
  std::int32_t fault_result;   // the ncclResult_t a `fail` answered, 0 otherwise
  std::uint32_t reserved;
};

/// Whether `s` is a state of this layout that its writer finished filling in.
inline bool nccl_state_valid(const nccl_rank_state& s) noexcept {
  return s.magic == nccl_state_magic && s.version == nccl_state_version;
}

}  // namespace faultline::agent
