// The phase table: one file per run directory in which every agent-carrying process of the run
// keeps its phase markers (protocol.h, "phases").
//
// The runner makes the file once per run directory and zeroes its used part before each run; a
// process claims a slot with one atomic increment on the shared mapping and writes its markers
// there with plain stores. Before the table, each process created a phase.PID file and the runner
// removed it after the run: on ext4 that pair of metadata operations was the largest part of what
// the preloaded agent cost a short-lived process. phase.PID stays the fallback for a directory
// without a table (the agent linked into a program run by hand) and for a process that finds the
// table full.
//
// Layout (native byte order, shared between the runner and the agent of the same machine):
//   bytes [0, phase_slot_bytes)    the header: magic, slot_bytes, slot_count, next
//   slot k, k in [0, slot_count)   at (k + 1) * phase_slot_bytes: pid, used, then `used` bytes of
//                                  markers ("run\nexit\n"), the rest NUL
// `next` counts the slots handed out (it may pass slot_count: those claims found the table full).
// A slot is published by storing its pid last (release); a reader skips a slot whose pid is 0.
#pragma once

#include <cstdint>

namespace faultline::agent {

inline constexpr const char* phase_table_file = "phases";
inline constexpr std::uint32_t phase_table_magic = 0x54504c46;  // "FLPT"
inline constexpr std::uint32_t phase_slot_bytes = 512;
inline constexpr std::uint32_t phase_table_slots = 127;
inline constexpr std::uint32_t phase_table_bytes = phase_slot_bytes * (phase_table_slots + 1);

struct phase_table_header {
  std::uint32_t magic;
  std::uint32_t slot_bytes;
  std::uint32_t slot_count;
  std::uint32_t next;  // atomic: slots handed out
};

struct phase_slot {
  std::int32_t pid;    // atomic: 0 until the slot's owner published it
  std::uint32_t used;  // atomic: bytes of markers reserved
  char markers[phase_slot_bytes - 8];
};

static_assert(sizeof(phase_slot) == phase_slot_bytes);
static_assert(sizeof(phase_table_header) <= phase_slot_bytes);

/// Whether `header` describes a table of this layout.
inline bool phase_table_valid(const phase_table_header& header) noexcept {
  return header.magic == phase_table_magic && header.slot_bytes == phase_slot_bytes &&
         header.slot_count == phase_table_slots;
}

}  // namespace faultline::agent
