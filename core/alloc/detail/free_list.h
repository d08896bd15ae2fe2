// Private: the pool's block bookkeeping — blocks as intrusive nodes, and a per-stream free list
// with exact best fit over size-class bins.
//
// Every upstream block is tiled by a chain of `block_node`s linked to their physical neighbours
// (`phys_prev`/`phys_next`), in address order, live and free alike (boundary tags). Chains never
// link two upstream blocks, so free space can never coalesce across an upstream boundary, and
// coalescing a freed block is O(1): look at its two neighbours.
//
// A `free_list` holds the free nodes of one stream in size-class bins (two levels: a power of two
// of 256-byte granules, then 16 linear steps inside it; blocks under 8 KiB get exact classes),
// with a bitmap of non-empty bins. Best fit is exact: the smallest block that holds the request,
// the lowest address among equal sizes. It looks at the request's own bin (whose blocks may be
// smaller than the request) and then at the first non-empty bin above it (whose blocks all fit);
// the cost is the length of those two bins, which stay short unless thousands of free blocks
// share one size class.
//
// Bins are circular lists through a sentinel, so linking and unlinking branch neither on an
// empty bin nor on an end, and a split or merge always moves the node to the bin of its final
// size: a best fit leaves a small remainder and a merge grows a block, so the size class changes
// nearly every time (99.9% of splits and 99% of merges in alloc_bench's pairs), in no pattern a
// branch predictor learns. Mispredicted branches, not instructions, were most of the cost.
//
// Nodes come from a `node_pool` and go back to it, so the steady state allocates no host memory.
//
// Thread safety: none; the pool's mutex guards all of it.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace faultline::core::alloc::detail {

class free_list;

/// A node's links in a free list's bin: a circular list through the bin's sentinel, so linking
/// and unlinking need no branch on an empty bin or an end.
struct bin_link {
  bin_link* prev = nullptr;
  bin_link* next = nullptr;
};

/// One block of pool memory: [address, address + bytes) inside upstream block `upstream_id`.
struct block_node {
  bin_link link;                    // first member: a bin's links are converted back to the node
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  std::uint64_t upstream_id = 0;
  block_node* phys_prev = nullptr;  // the block just below, in the same upstream block
  block_node* phys_next = nullptr;  // the block just above (also the node pool's free link)
  block_node* live_next = nullptr;  // the next node in its address_map bucket, while live
  free_list* owner = nullptr;       // the free list holding it; nullptr while live
  std::uint32_t bin = 0;            // its size class while owned
};

/// Recycles block nodes; allocates them in chunks.
class node_pool {
 public:
  /// A node with every field zeroed.
  block_node* acquire();
  /// A node whose fields hold garbage: the caller sets every one (the split's fast path).
  block_node* acquire_unset() {
    block_node* n = free_;
    if (n == nullptr) return acquire_from_chunk();
    free_ = n->phys_next;
    return n;
  }
  void release(block_node* n) noexcept {
    n->owner = nullptr;
    n->phys_next = free_;
    free_ = n;
  }
  /// Forgets every node at once (all chains and lists referring to them must be dropped too).
  void reset() noexcept;

 private:
  block_node* acquire_from_chunk();

  static constexpr std::size_t chunk_nodes = 256;
  std::vector<std::unique_ptr<block_node[]>> chunks_;
  std::size_t used_in_last_ = chunk_nodes;
  block_node* free_ = nullptr;
};

class free_list {
 public:
  free_list() noexcept;
  free_list(const free_list&) = delete;
  free_list& operator=(const free_list&) = delete;

  /// Adds the free node `n` (not in any list), merging it with physical neighbours that are on
  /// this list; merged-away nodes go back to `pool`. Returns the node that now holds `n`'s bytes.
  block_node* insert(block_node* n, node_pool& pool);

  /// Adds `n` without merging. For tests that plant a broken list; never used by the pool.
  void insert_uncoalesced_for_testing(block_node* n);

  /// Takes `bytes` from the best-fitting block: returns a node of exactly `bytes` (owner cleared),
  /// leaving the rest of the block, if any, on the list as a new node from `pool`. nullptr when
  /// no block fits.
  block_node* take_best_fit(std::size_t bytes, node_pool& pool);

  /// The size of the block take_best_fit(bytes) would split, or 0 when none fits.
  [[nodiscard]] std::size_t best_fit_bytes(std::size_t bytes) const noexcept;

  /// Takes the free node `n` (on this list) off it, without merging or splitting anything.
  void remove(block_node* n) noexcept;

  /// Moves every node of `other` onto this list, merging each with physical neighbours already
  /// here (merged-away nodes go back to `pool`); `other` ends empty.
  void absorb(free_list& other, node_pool& pool);

  [[nodiscard]] bool empty() const noexcept { return block_count_ == 0; }
  [[nodiscard]] std::size_t block_count() const noexcept { return block_count_; }
  [[nodiscard]] std::size_t total_bytes() const noexcept { return total_bytes_; }
  [[nodiscard]] std::size_t largest_bytes() const noexcept;

  /// Empties the list without touching the nodes (their pool is reset by the caller).
  void clear() noexcept;

  /// Calls f(const block_node&) for every node, bin by bin.
  template <class F>
  void for_each(F&& f) const {
    for (const bin_link& head : bins_) {
      for (const bin_link* l = head.next; l != &head; l = l->next) f(*node_of(l));
    }
  }

  /// The list's own invariants: every node is owned by this list and filed in the bin of its
  /// size, the bitmaps match the bins, the byte and block totals are exact, and no node touches a
  /// physical neighbour on this same list (coalesced). Returns an empty string when they hold,
  /// else a description of the first violation. Linear in the list's length.
  [[nodiscard]] std::string check() const;

  /// Size class of a block of `bytes` (a multiple of 256); exposed for tests.
  [[nodiscard]] static std::uint32_t bin_of(std::size_t bytes) noexcept {
    const std::uint64_t granules = bytes >> 8;
    if (granules < (std::uint64_t{1} << sub_bits)) return static_cast<std::uint32_t>(granules);
    const unsigned msb = 63u - static_cast<unsigned>(std::countl_zero(granules));
    const unsigned level = msb - sub_bits + 1;
    const auto sub = static_cast<std::uint32_t>((granules >> (msb - sub_bits)) & ((1u << sub_bits) - 1));
    return (level << sub_bits) | sub;
  }

  static constexpr unsigned sub_bits = 4;                        // 16 steps per power of two
  static constexpr unsigned levels = 41;                         // granule counts below 2^44
  static constexpr std::size_t bin_count = std::size_t{levels} << sub_bits;
  /// Largest block the bins can file (2^52 bytes); the pool refuses larger requests.
  static constexpr std::size_t max_block_bytes = std::size_t{1} << 52;

 private:
  static const block_node* node_of(const bin_link* l) noexcept { return reinterpret_cast<const block_node*>(l); }
  static block_node* node_of(bin_link* l) noexcept { return reinterpret_cast<block_node*>(l); }

  // Bin membership only; byte totals are kept by the public operations. Neither branches on the
  // bin's state: bins change with nearly every operation, in no pattern a predictor learns.
  void link(block_node* n, std::uint32_t bin) noexcept;
  void unlink(block_node* n) noexcept;
  /// The smallest (bytes, address) node of bin `b` with bytes >= `bytes`, or nullptr.
  block_node* best_in_bin(std::uint32_t b, std::size_t bytes) const noexcept;
  /// The first non-empty bin above `b`, or bin_count.
  std::uint32_t next_nonempty_after(std::uint32_t b) const noexcept;
  block_node* find(std::size_t bytes) const noexcept;

  std::array<bin_link, bin_count> bins_;               // sentinels; an empty bin links to itself
  std::uint64_t level_bits_ = 0;                      // level l has a non-empty bin
  std::array<std::uint32_t, levels> sub_bits_{};      // per level: which bins are non-empty
  std::size_t total_bytes_ = 0;
  std::size_t block_count_ = 0;
  block_node sink_;  // takes the stores meant for the neighbour above an upstream block's last
};

}  // namespace faultline::core::alloc::detail
