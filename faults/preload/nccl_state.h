// A rank's NCCL state (protocol.h, "nccl.PID"): what the preloaded agent keeps, per process, about
// the NCCL calls the program made, so that the runner can say after a hang which collective could
// not complete, which ranks issued it, which did not and why.
//
// NCCL's collectives are asynchronous: ncclAllReduce enqueues work on a stream and returns, and a
// rank whose peer never joins waits later, in a stream or event synchronize or in the framework's
// own wait. So "inside the collective" cannot be read from the stack alone. What tells the ranks
// apart is each rank's record of the collectives it issued, numbered in order on each
// communicator (as PyTorch's flight recorder numbers them), and how far its stream has completed
// them: the first collective that some rank never issued, or issued and never completed, is the
// one the run hangs at; two ranks that issued different collectives under one number are a
// desync.
//
// The file: $FAULTLINE_RUN_DIR/nccl.PID, created by the agent at the first NCCL call it stands
// before (never in a process that makes none), sized to sizeof(nccl_rank_state) and mapped shared,
// so that each call is a few stores to memory, not a system call. The fields are updated with
// relaxed atomic stores, `calls[]` and `collectives` before `in_call`; a ring entry's `seq` is
// stored last (release), so a reader that finds the seq it expects finds the entry whole. The
// runner reads the file after the run's processes have stopped or been killed (a mapping of a file
// outlives its process); at a hang's deadline it first asks the live ranks to bring `completed` up
// to date (`query_request`, a futex word the agent's completion thread waits on).
// Native byte order: writer and reader are on one machine.
#pragma once

#include <cstdint>
#include <string_view>

#include "faults/nccl_names.h"

namespace faultline::agent {

inline constexpr const char* nccl_file_prefix = "nccl.";
inline constexpr std::uint32_t nccl_state_magic = 0x434e4c46;  // "FLNC"
inline constexpr std::uint32_t nccl_state_version = 2;
/// The collectives a rank's file keeps, its latest ones (nccl_rank_state::ring; a power of two).
inline constexpr std::uint32_t nccl_ring_size = 256;
/// The communicators a rank's file keeps (nccl_rank_state::comm_table), in the order they were
/// made; collectives on a later one are recorded with communicator id 0 (unknown).
inline constexpr std::uint32_t nccl_comm_slots = 8;
/// The length of a fault's item pattern kept (nccl_rank_state::fault_item), with its NUL.
inline constexpr std::uint32_t nccl_item_chars = 64;

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
  delayed,  // `delay`: the call was made late (fault_delay_ns; fault_active while asleep in it)
};

/// One collective a rank issued (nccl_rank_state::ring[seq % nccl_ring_size]).
struct nccl_collective_entry {
  std::uint64_t count;     ///< its count argument (sendcount, recvcount: as the API names it)
  std::uint64_t comm;      ///< the communicator's id (nccl_comm_entry::id), 0 when unknown
  std::uint32_t seq;       ///< the rank's sequence number of it, 1-based: stored last; 0 = empty
  std::uint32_t comm_seq;  ///< its number on its communicator, 1-based
  std::uint32_t api;       ///< nccl_api
  std::uint32_t datatype;  ///< ncclDataType_t
  std::int32_t root;       ///< ncclBroadcast's and ncclReduce's root, -1 for the others
  std::uint32_t op;        ///< ncclRedOp_t of the reductions, nccl_no_op for the others
};
inline constexpr std::uint32_t nccl_no_op = 0xffffffffu;

/// A communicator the rank took part in making (ncclCommInitRank(Config)), entered before the call
/// is made: a rank whose init a point failed still belongs to it.
struct nccl_comm_entry {
  /// The same on every rank of the communicator: a hash of its ncclUniqueId (never 0).
  std::uint64_t id;
  std::uint64_t handle;       ///< this process's ncclComm_t once the init returned, 0 before
  std::int32_t nranks;
  std::int32_t rank;          ///< this process's rank in it
  std::uint32_t collectives;  ///< collectives issued on it: its sequence number
  std::uint32_t reserved;
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
  /// the rank's sequence number over all its communicators.
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
  /// 1 while the point's action runs (asleep in its delay), 0 once the call went on.
  std::uint32_t fault_active;
  std::uint32_t reserved;
  std::uint64_t fault_delay_ns;  // a `delay`'s duration
  /// The pattern of the spec item that acted ("nccl/ncclCommInitRank*"), NUL-terminated.
  char fault_item[nccl_item_chars];
  /// The status the process passed to exit() (the agent's interposed exit), once it did.
  std::int32_t exit_code;
  std::uint32_t exited;  // 1 once exit() was called
  /// How far the rank's stream has completed its collectives: every collective with a sequence
  /// number up to `completed` is known complete (from events the agent recorded after each one on
  /// its stream). Meaningful only when `completion_known` is 1: without a CUDA driver no event is
  /// recorded, and the runner takes a collective as complete once its call returned.
  std::uint32_t completed;
  std::uint32_t completion_known;
  /// The runner's request for a fresh `completed` (bumped, then woken) and the agent's answer
  /// (set to the request it served, then woken). `answers` is 1 while a thread serves them.
  std::uint32_t query_request;
  std::uint32_t query_answer;
  std::uint32_t answers;
  std::uint32_t comm_count;  // entries of comm_table in use
  nccl_comm_entry comm_table[nccl_comm_slots];
  nccl_collective_entry ring[nccl_ring_size];
};

static_assert(sizeof(nccl_collective_entry) == 40 && sizeof(nccl_comm_entry) == 32, "the file's layout is fixed");

/// Whether `s` is a state of this layout that its writer finished filling in.
inline bool nccl_state_valid(const nccl_rank_state& s) noexcept {
  return s.magic == nccl_state_magic && s.version == nccl_state_version;
}

}  // namespace faultline::agent
