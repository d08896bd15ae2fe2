#include "core/alloc/detail/free_list.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <type_traits>

namespace faultline::core::alloc::detail {

// --- node_pool --------------------------------------------------------------------------------

block_node* node_pool::acquire() {
  block_node* n = acquire_unset();
  *n = block_node{};
  return n;
}

block_node* node_pool::acquire_from_chunk() {
  if (used_in_last_ == chunk_nodes) {
    chunks_.push_back(std::make_unique<block_node[]>(chunk_nodes));
    used_in_last_ = 0;
  }
  return &chunks_.back()[used_in_last_++];
}

void node_pool::reset() noexcept {
  chunks_.clear();
  used_in_last_ = chunk_nodes;
  free_ = nullptr;
}

// --- free_list --------------------------------------------------------------------------------
//
// The private bin operations are defined `inline` ahead of their callers: they are the hot path
// of every allocate and deallocate, and a call each would cost as much as their bodies.

// node_of() converts a bin's links back to their node: `link` is the first member of a
// standard-layout struct, so the two addresses are one.
static_assert(std::is_standard_layout_v<block_node> && offsetof(block_node, link) == 0);

free_list::free_list() noexcept { clear(); }

inline void free_list::link(block_node* n, std::uint32_t b) noexcept {
  bin_link& head = bins_[b];
  n->bin = b;
  n->owner = this;
  n->link.prev = &head;
  n->link.next = head.next;
  head.next->prev = &n->link;
  head.next = &n->link;
  ++block_count_;
  const std::uint32_t level = b >> sub_bits;
  sub_bits_[level] |= 1u << (b & ((1u << sub_bits) - 1));
  level_bits_ |= std::uint64_t{1} << level;
}

inline void free_list::unlink(block_node* n) noexcept {
  bin_link* const prev = n->link.prev;
  bin_link* const next = n->link.next;
  prev->next = next;
  next->prev = prev;
  n->owner = nullptr;
  --block_count_;
  // The bin's bit clears when the bin emptied, and the level's when the level did.
  const std::uint32_t b = n->bin;
  const std::uint32_t level = b >> sub_bits;
  const auto emptied = static_cast<unsigned>(bins_[b].next == &bins_[b]);
  sub_bits_[level] &= ~(emptied << (b & ((1u << sub_bits) - 1)));
  level_bits_ &= ~(std::uint64_t{sub_bits_[level] == 0} << level);
}

block_node* free_list::insert(block_node* n, node_pool& pool) {
  total_bytes_ += n->bytes;
  block_node* low = n;
  block_node* above = n->phys_next;
  std::size_t bytes = n->bytes;
  if (block_node* prev = n->phys_prev; prev != nullptr && prev->owner == this) {
    // The lower node absorbs the upper one, so an upstream block's first node stays its first.
    unlink(prev);
    bytes += prev->bytes;
    pool.release(n);
    low = prev;
  }
  if (above != nullptr && above->owner == this) {
    block_node* const next = above;
    unlink(next);
    bytes += next->bytes;
    above = next->phys_next;
    pool.release(next);
  }
  low->bytes = bytes;
  low->phys_next = above;
  (above != nullptr ? above : &sink_)->phys_prev = low;
  link(low, bin_of(bytes));
  return low;
}

void free_list::insert_uncoalesced_for_testing(block_node* n) {
  total_bytes_ += n->bytes;
  link(n, bin_of(n->bytes));
}

inline block_node* free_list::best_in_bin(std::uint32_t b, std::size_t bytes) const noexcept {
  const bin_link* const head = &bins_[b];
  block_node* best = nullptr;
  for (bin_link* l = head->next; l != head; l = l->next) {
    block_node* const n = node_of(l);
    if (n->bytes < bytes) continue;
    if (best == nullptr || n->bytes < best->bytes || (n->bytes == best->bytes && n->address < best->address)) {
      best = n;
    }
  }
  return best;
}

inline std::uint32_t free_list::next_nonempty_after(std::uint32_t b) const noexcept {
  // Both candidates are computed and one is selected: whether the next bin lies in the same
  // level follows the request sizes, which no predictor learns. (countr_zero of 0 is the width:
  // clamped to stay an index, and never selected.)
  const std::uint32_t level = b >> sub_bits;
  const std::uint32_t above = sub_bits_[level] & (~1u << (b & ((1u << sub_bits) - 1)));
  const std::uint32_t same_level = (level << sub_bits) | static_cast<std::uint32_t>(std::countr_zero(above));
  const std::uint64_t higher = level_bits_ & (~std::uint64_t{1} << level);
  const auto next_level = std::min(static_cast<std::uint32_t>(std::countr_zero(higher)), std::uint32_t{levels - 1});
  const std::uint32_t higher_level =
      (next_level << sub_bits) | static_cast<std::uint32_t>(std::countr_zero(unsigned{sub_bits_[next_level]}));
  const std::uint32_t found = higher != 0 ? higher_level : static_cast<std::uint32_t>(bin_count);
  const std::uint32_t in_level = 0u - static_cast<std::uint32_t>(above != 0);  // all ones or zero
  return (same_level & in_level) | (found & ~in_level);
}

// Inlined into take_best_fit by force: the compiler keeps it out of line for its two callers.
[[gnu::always_inline]] inline block_node* free_list::find(std::size_t bytes) const noexcept {
  const std::uint32_t b = bin_of(bytes);
  if (block_node* n = best_in_bin(b, bytes)) return n;
  const std::uint32_t above = next_nonempty_after(b);
  return above == bin_count ? nullptr : best_in_bin(above, 0);
}

block_node* free_list::take_best_fit(std::size_t bytes, node_pool& pool) {
  block_node* const n = find(bytes);
  if (n == nullptr) return nullptr;
  total_bytes_ -= bytes;
  unlink(n);
  const std::size_t rest_bytes = n->bytes - bytes;
  if (rest_bytes == 0) return n;
  // The caller gets the front; the rest becomes a new node in the bin of its size.
  block_node* const rest = pool.acquire_unset();
  rest->address = n->address + bytes;
  rest->bytes = rest_bytes;
  rest->upstream_id = n->upstream_id;
  rest->phys_prev = n;
  rest->phys_next = n->phys_next;
  // The block above, or the sink when n was its upstream block's last (over a third of the
  // splits in alloc_bench's pairs, in no order a predictor learns).
  (n->phys_next != nullptr ? n->phys_next : &sink_)->phys_prev = rest;
  n->phys_next = rest;
  n->bytes = bytes;
  link(rest, bin_of(rest_bytes));
  return n;
}

std::size_t free_list::best_fit_bytes(std::size_t bytes) const noexcept {
  const block_node* n = find(bytes);
  return n == nullptr ? 0 : n->bytes;
}

void free_list::remove(block_node* n) noexcept {
  total_bytes_ -= n->bytes;
  unlink(n);
}

void free_list::absorb(free_list& other, node_pool& pool) {
  while (other.level_bits_ != 0) {
    const auto level = static_cast<std::uint32_t>(std::countr_zero(other.level_bits_));
    const auto sub = static_cast<std::uint32_t>(std::countr_zero(unsigned{other.sub_bits_[level]}));
    block_node* n = node_of(other.bins_[(level << sub_bits) | sub].next);
    other.remove(n);
    insert(n, pool);
  }
}

std::size_t free_list::largest_bytes() const noexcept {
  if (level_bits_ == 0) return 0;
  const unsigned level = 63u - static_cast<unsigned>(std::countl_zero(level_bits_));
  const unsigned sub = 31u - static_cast<unsigned>(std::countl_zero(unsigned{sub_bits_[level]}));
  const bin_link& head = bins_[(level << sub_bits) | sub];
  std::size_t largest = 0;
  for (const bin_link* l = head.next; l != &head; l = l->next) largest = std::max(largest, node_of(l)->bytes);
  return largest;
}

void free_list::clear() noexcept {
  for (bin_link& head : bins_) head.prev = head.next = &head;
  sub_bits_.fill(0);
  level_bits_ = 0;
  total_bytes_ = 0;
  block_count_ = 0;
}

std::string free_list::check() const {
  std::size_t total = 0;
  std::size_t count = 0;
  for (std::uint32_t b = 0; b < bin_count; ++b) {
    const bool marked = ((sub_bits_[b >> sub_bits] >> (b & ((1u << sub_bits) - 1))) & 1u) != 0;
    const bin_link& head = bins_[b];
    if (marked != (head.next != &head)) return "bitmap disagrees with bin " + std::to_string(b);
    const bin_link* prev = &head;
    for (const bin_link* l = head.next; l != &head; l = l->next) {
      const block_node* n = node_of(l);
      const std::string at = "free block at " + std::to_string(n->address);
      if (n->owner != this) return at + " is filed here but owned by another list";
      if (l->prev != prev) return at + " has a broken bin link";
      if (n->bytes == 0 || n->bytes % 256 != 0) return at + " has size " + std::to_string(n->bytes);
      if (bin_of(n->bytes) != b || n->bin != b) return at + " is filed in the wrong size class";
      if (n->phys_prev != nullptr && n->phys_prev->owner == this) {
        return "free list not coalesced: " + at + " touches the free block below it";
      }
      if (n->phys_next != nullptr && n->phys_next->owner == this) {
        return "free list not coalesced: " + at + " touches the free block above it";
      }
      total += n->bytes;
      ++count;
      prev = l;
    }
    if (head.prev != prev) return "bin " + std::to_string(b) + " has a broken back link";
  }
  for (unsigned level = 0; level < levels; ++level) {
    if (((level_bits_ >> level) & 1u) != (sub_bits_[level] != 0 ? 1u : 0u)) {
      return "level bitmap disagrees with level " + std::to_string(level);
    }
  }
  if (total != total_bytes_) {
    return "free byte total " + std::to_string(total_bytes_) + " differs from the sum of blocks " +
           std::to_string(total);
  }
  if (count != block_count_) {
    return "free block count " + std::to_string(block_count_) + " differs from the blocks filed " +
           std::to_string(count);
  }
  return {};
}

}  // namespace faultline::core::alloc::detail
