#include "core/alloc/detail/free_list.h"

#include <bit>

namespace faultline::core::alloc::detail {

// --- node_pool --------------------------------------------------------------------------------

block_node* node_pool::acquire() {
  block_node* n = free_;
  if (n != nullptr) {
    free_ = n->phys_next;
  } else {
    if (used_in_last_ == chunk_nodes) {
      chunks_.push_back(std::make_unique<block_node[]>(chunk_nodes));
      used_in_last_ = 0;
    }
    n = &chunks_.back()[used_in_last_++];
  }
  *n = block_node{};
  return n;
}

void node_pool::release(block_node* n) noexcept {
  n->owner = nullptr;
  n->phys_next = free_;
  free_ = n;
}

void node_pool::reset() noexcept {
  chunks_.clear();
  used_in_last_ = chunk_nodes;
  free_ = nullptr;
}

// --- free_list --------------------------------------------------------------------------------

free_list::free_list() noexcept = default;

std::uint32_t free_list::bin_of(std::size_t bytes) noexcept {
  const std::uint64_t granules = bytes >> 8;
  if (granules < (std::uint64_t{1} << sub_bits)) return static_cast<std::uint32_t>(granules);
  const unsigned msb = 63u - static_cast<unsigned>(std::countl_zero(granules));
  const unsigned level = msb - sub_bits + 1;
  const auto sub = static_cast<std::uint32_t>((granules >> (msb - sub_bits)) & ((1u << sub_bits) - 1));
  return (level << sub_bits) | sub;
}

void free_list::link(block_node* n) noexcept {
  const std::uint32_t b = bin_of(n->bytes);
  n->bin = b;
  n->owner = this;
  n->bin_prev = nullptr;
  n->bin_next = bins_[b];
  if (bins_[b] != nullptr) bins_[b]->bin_prev = n;
  bins_[b] = n;
  const std::uint32_t level = b >> sub_bits;
  sub_bits_[level] = static_cast<std::uint16_t>(sub_bits_[level] | (1u << (b & ((1u << sub_bits) - 1))));
  level_bits_ |= std::uint64_t{1} << level;
  ++block_count_;
}

void free_list::unlink(block_node* n) noexcept {
  const std::uint32_t b = n->bin;
  if (n->bin_prev != nullptr) {
    n->bin_prev->bin_next = n->bin_next;
  } else {
    bins_[b] = n->bin_next;
  }
  if (n->bin_next != nullptr) n->bin_next->bin_prev = n->bin_prev;
  if (bins_[b] == nullptr) {
    const std::uint32_t level = b >> sub_bits;
    sub_bits_[level] = static_cast<std::uint16_t>(sub_bits_[level] & ~(1u << (b & ((1u << sub_bits) - 1))));
    if (sub_bits_[level] == 0) level_bits_ &= ~(std::uint64_t{1} << level);
  }
  n->bin_prev = n->bin_next = nullptr;
  n->owner = nullptr;
  --block_count_;
}

void free_list::replace(block_node* old, block_node* fresh) noexcept {
  fresh->bin = old->bin;
  fresh->owner = this;
  fresh->bin_prev = old->bin_prev;
  fresh->bin_next = old->bin_next;
  if (old->bin_prev != nullptr) {
    old->bin_prev->bin_next = fresh;
  } else {
    bins_[old->bin] = fresh;
  }
  if (old->bin_next != nullptr) old->bin_next->bin_prev = fresh;
  old->bin_prev = old->bin_next = nullptr;
  old->owner = nullptr;
}

void free_list::refile(block_node* n) noexcept {
  if (bin_of(n->bytes) == n->bin) return;
  unlink(n);
  link(n);
}

block_node* free_list::insert(block_node* n, node_pool& pool) {
  total_bytes_ += n->bytes;
  bool filed = false;
  block_node* prev = n->phys_prev;
  if (prev != nullptr && prev->owner == this) {
    // `prev` absorbs `n` and keeps its place (a merge keeps the lower node, so an upstream
    // block's first node stays its first).
    prev->bytes += n->bytes;
    prev->phys_next = n->phys_next;
    if (n->phys_next != nullptr) n->phys_next->phys_prev = prev;
    pool.release(n);
    n = prev;
    filed = true;
  }
  block_node* next = n->phys_next;
  if (next != nullptr && next->owner == this) {
    n->bytes += next->bytes;
    n->phys_next = next->phys_next;
    if (next->phys_next != nullptr) next->phys_next->phys_prev = n;
    if (filed) {
      unlink(next);
    } else {
      replace(next, n);
      filed = true;
    }
    pool.release(next);
  }
  if (filed) {
    refile(n);
  } else {
    link(n);
  }
  return n;
}

void free_list::insert_uncoalesced_for_testing(block_node* n) {
  total_bytes_ += n->bytes;
  link(n);
}

block_node* free_list::best_in_bin(std::uint32_t b, std::size_t bytes) const noexcept {
  block_node* best = nullptr;
  for (block_node* n = bins_[b]; n != nullptr; n = n->bin_next) {
    if (n->bytes < bytes) continue;
    if (best == nullptr || n->bytes < best->bytes || (n->bytes == best->bytes && n->address < best->address)) {
      best = n;
    }
  }
  return best;
}

std::uint32_t free_list::next_nonempty_after(std::uint32_t b) const noexcept {
  const std::uint32_t level = b >> sub_bits;
  const std::uint32_t sub = b & ((1u << sub_bits) - 1);
  const std::uint32_t above = sub_bits_[level] & ~((2u << sub) - 1);
  if (above != 0) return (level << sub_bits) | static_cast<std::uint32_t>(std::countr_zero(above));
  if (level + 1 >= levels) return bin_count;
  const std::uint64_t higher = level_bits_ & ~((std::uint64_t{2} << level) - 1);
  if (higher == 0) return bin_count;
  const auto next_level = static_cast<std::uint32_t>(std::countr_zero(higher));
  return (next_level << sub_bits) | static_cast<std::uint32_t>(std::countr_zero(unsigned{sub_bits_[next_level]}));
}

block_node* free_list::find(std::size_t bytes) const noexcept {
  const std::uint32_t b = bin_of(bytes);
  if (block_node* n = best_in_bin(b, bytes)) return n;
  const std::uint32_t above = next_nonempty_after(b);
  return above == bin_count ? nullptr : best_in_bin(above, 0);
}

block_node* free_list::take_best_fit(std::size_t bytes, node_pool& pool) {
  block_node* n = find(bytes);
  if (n == nullptr) return nullptr;
  if (n->bytes == bytes) {
    unlink(n);
  } else {
    // The caller gets the front; the rest becomes a new node that takes n's place in its bin,
    // usually without changing size class.
    block_node* rest = pool.acquire();
    rest->address = n->address + bytes;
    rest->bytes = n->bytes - bytes;
    rest->upstream_id = n->upstream_id;
    rest->phys_prev = n;
    rest->phys_next = n->phys_next;
    if (n->phys_next != nullptr) n->phys_next->phys_prev = rest;
    n->phys_next = rest;
    n->bytes = bytes;
    replace(n, rest);
    refile(rest);
  }
  total_bytes_ -= bytes;
  return n;
}

std::size_t free_list::best_fit_bytes(std::size_t bytes) const noexcept {
  const block_node* n = find(bytes);
  return n == nullptr ? 0 : n->bytes;
}

std::size_t free_list::largest_bytes() const noexcept {
  if (level_bits_ == 0) return 0;
  const unsigned level = 63u - static_cast<unsigned>(std::countl_zero(level_bits_));
  const unsigned sub = 31u - static_cast<unsigned>(std::countl_zero(unsigned{sub_bits_[level]}));
  std::size_t largest = 0;
  for (const block_node* n = bins_[(level << sub_bits) | sub]; n != nullptr; n = n->bin_next) {
    if (n->bytes > largest) largest = n->bytes;
  }
  return largest;
}

void free_list::clear() noexcept {
  bins_.fill(nullptr);
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
    if (marked != (bins_[b] != nullptr)) return "bitmap disagrees with bin " + std::to_string(b);
    const block_node* prev = nullptr;
    for (const block_node* n = bins_[b]; n != nullptr; n = n->bin_next) {
      const std::string at = "free block at " + std::to_string(n->address);
      if (n->owner != this) return at + " is filed here but owned by another list";
      if (n->bin_prev != prev) return at + " has a broken bin link";
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
      prev = n;
    }
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
