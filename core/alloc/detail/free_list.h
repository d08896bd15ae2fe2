// Private: the pool's block bookkeeping — blocks as intrusive nodes, and a per-stream free list
// with exact best fit over size-class bins.
//
// Every upstream block is tiled by a chain of `block_node`s linked to their physical neighbours
// (`phys_prev`/`phys_next`), in address order, live and free alike (boundary tags). Chains never
// link two upstream blocks, so free space can never coalesce across an upstream boundary, and
// coalescing a freed block is O(1): look at its two neighbours.
//
// A `free_list` holds the free nodes of one stream in size-class bins (two levels: a power of two
// of 256-byte granules, then 16 linear steps inside it; requests under 4 KiB get exact classes),
// with a bitmap of non-empty bins. Best fit is exact: the smallest block that holds the request,
// the lowest address among equal sizes. It looks at the request's own bin (whose blocks may be
// smaller than the request) and then at the first non-empty bin above it (whose blocks all fit);
// the cost is the length of those two bins, which stay short unless thousands of free blocks
// share one size class.
//
// Nodes come from a `node_pool` and go back to it, so the steady state allocates no host memory.
//
// Thread safety: none; the pool's mutex guards all of it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace faultline::core::alloc::detail {

class free_list;

/// One block of pool memory: [address, address + bytes) inside upstream block `upstream_id`.
struct block_node {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  std::uint64_t upstream_id = 0;
  block_node* phys_prev = nullptr;  // the block just below, in the same upstream block
  block_node* phys_next = nullptr;  // the block just above (also the node pool's free link)
  block_node* bin_prev = nullptr;   // neighbours in a free list's bin
  block_node* bin_next = nullptr;
  free_list* owner = nullptr;       // the free list holding it; nullptr while live
  std::uint32_t bin = 0;
};

/// Recycles block nodes; allocates them in chunks.
class node_pool {
 public:
  block_node* acquire();
  void release(block_node* n) noexcept;
  /// Forgets every node at once (all chains and lists referring to them must be dropped too).
  void reset() noexcept;

 private:
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

  [[nodiscard]] bool empty() const noexcept { return block_count_ == 0; }
  [[nodiscard]] std::size_t block_count() const noexcept { return block_count_; }
  [[nodiscard]] std::size_t total_bytes() const noexcept { return total_bytes_; }
  [[nodiscard]] std::size_t largest_bytes() const noexcept;

  /// Empties the list without touching the nodes (their pool is reset by the caller).
  void clear() noexcept;

  /// Calls f(const block_node&) for every node, bin by bin.
  template <class F>
  void for_each(F&& f) const {
    for (const block_node* head : bins_) {
      for (const block_node* n = head; n != nullptr; n = n->bin_next) f(*n);
    }
  }

  /// The list's own invariants: every node is owned by this list and filed in the bin of its
  /// size, the bitmaps match the bins, the byte and block totals are exact, and no node touches a
  /// physical neighbour on this same list (coalesced). Returns an empty string when they hold,
  /// else a description of the first violation. Linear in the list's length.
  [[nodiscard]] std::string check() const;

  /// Size class of a block of `bytes` (a multiple of 256); exposed for tests.
  [[nodiscard]] static std::uint32_t bin_of(std::size_t bytes) noexcept;

  static constexpr unsigned sub_bits = 4;                        // 16 steps per power of two
  static constexpr unsigned levels = 41;                         // granule counts below 2^44
  static constexpr std::size_t bin_count = std::size_t{levels} << sub_bits;
  /// Largest block the bins can file (2^52 bytes); the pool refuses larger requests.
  static constexpr std::size_t max_block_bytes = std::size_t{1} << 52;

 private:
  // Bin membership only; byte totals are kept by the public operations.
  void link(block_node* n) noexcept;
  void unlink(block_node* n) noexcept;
  /// `fresh` takes `old`'s place in its bin (same size class assumed until refile()).
  void replace(block_node* old, block_node* fresh) noexcept;
  /// Moves `n` to the bin of its current size, if that changed.
  void refile(block_node* n) noexcept;
  /// The smallest (bytes, address) node of bin `b` with bytes >= `bytes`, or nullptr.
  block_node* best_in_bin(std::uint32_t b, std::size_t bytes) const noexcept;
  /// The first non-empty bin above `b`, or bin_count.
  std::uint32_t next_nonempty_after(std::uint32_t b) const noexcept;
  block_node* find(std::size_t bytes) const noexcept;

  std::array<block_node*, bin_count> bins_{};
  std::uint64_t level_bits_ = 0;                      // level l has a non-empty bin
  std::array<std::uint16_t, levels> sub_bits_{};      // per level: which bins are non-empty
  std::size_t total_bytes_ = 0;
  std::size_t block_count_ = 0;
};

}  // namespace faultline::core::alloc::detail
