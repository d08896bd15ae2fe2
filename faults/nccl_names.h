// The NCCL functions the nccl/ points stand before, by name: the one list the command checks a
// spec's nccl/ names against and the agent numbers its calls by (faults/preload/nccl_state.h's
// nccl_api: index i here is id i there; index 0, "", is no call). Header only, constexpr: the
// preloaded agent reads it without libstdc++.
#pragma once

#include <cstddef>
#include <string_view>

namespace faultline::faults {

inline constexpr std::string_view nccl_function_names[] = {
    "",
    "ncclAllReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclBroadcast",
    "ncclReduce",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommFinalize",
    "ncclCommAbort",
    "ncclCommDestroy",
};

inline constexpr std::size_t nccl_function_count = sizeof(nccl_function_names) / sizeof(nccl_function_names[0]);

/// The id of the NCCL function `name` ("ncclAllReduce" → 1), 0 when it is not one of them.
constexpr std::size_t nccl_function_id(std::string_view name) noexcept {
  for (std::size_t i = 1; i < nccl_function_count; ++i) {
    if (nccl_function_names[i] == name) return i;
  }
  return 0;
}

/// ncclResult_t by name, as nccl.h numbers them: fail(NAME) on an nccl/ point.
struct nccl_result_name {
  std::string_view name;
  int value;
};
inline constexpr nccl_result_name nccl_results[] = {
    {"ncclSuccess", 0},       {"ncclUnhandledCudaError", 1}, {"ncclSystemError", 2}, {"ncclInternalError", 3},
    {"ncclInvalidArgument", 4}, {"ncclInvalidUsage", 5},       {"ncclRemoteError", 6}, {"ncclInProgress", 7},
    {"ncclTimeout", 8},
};

/// The value of the ncclResult_t named `name`, or -1.
constexpr int nccl_result_value(std::string_view name) noexcept {
  for (const auto& r : nccl_results) {
    if (r.name == name) return r.value;
  }
  return -1;
}

}  // namespace faultline::faults
