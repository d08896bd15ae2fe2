#include "core/device/sim/detail/block_allocator.h"

namespace faultline::core::device::detail {

namespace {

struct size_class {
  int fl;
  int sl;
};

constexpr int sl_bits = 4;
constexpr int sl_count = 1 << sl_bits;

int floor_log2(std::uint64_t n) noexcept { return 63 - __builtin_clzll(n); }

// Sizes below 16 granules get one exact class each (fl 0); above, 16 steps per power of two.
size_class class_of(std::uint64_t n) noexcept {
  if (n < sl_count) return {0, static_cast<int>(n)};
  const int l = floor_log2(n);
  return {l - (sl_bits - 1), static_cast<int>((n >> (l - sl_bits)) - sl_count)};
}

}  // namespace

void block_allocator::init(block_record* records, std::uint32_t record_capacity,
                           std::uint32_t* owner, std::uint32_t granules) noexcept {
  records_ = records;
  owner_ = owner;
  record_capacity_ = record_capacity;
  records_used_ = 1;
  spare_head_ = 0;
  granules_ = granules;
  in_use_ = 0;
  const std::uint32_t whole = new_record();
  records_[whole].start = 0;
  records_[whole].size = granules;
  records_[whole].state = block_state::free;
  insert_free(whole);
}

std::uint32_t block_allocator::new_record() noexcept {
  std::uint32_t index = 0;
  if (spare_head_ != 0) {
    index = spare_head_;
    spare_head_ = records_[index].free_next;
  } else if (records_used_ < record_capacity_) {
    index = records_used_++;
  } else {
    return 0;
  }
  records_[index] = block_record{};
  return index;
}

void block_allocator::recycle(std::uint32_t index) noexcept {
  records_[index].state = block_state::unused;
  records_[index].free_next = spare_head_;
  spare_head_ = index;
}

void block_allocator::insert_free(std::uint32_t index) noexcept {
  block_record& b = records_[index];
  const size_class c = class_of(b.size);
  std::uint32_t& head = heads_[c.fl][c.sl];
  b.free_prev = 0;
  b.free_next = head;
  if (head != 0) records_[head].free_prev = index;
  head = index;
  sl_bitmap_[c.fl] |= 1u << c.sl;
  fl_bitmap_ |= 1u << c.fl;
}

void block_allocator::remove_free(std::uint32_t index) noexcept {
  block_record& b = records_[index];
  const size_class c = class_of(b.size);
  if (b.free_prev != 0) records_[b.free_prev].free_next = b.free_next;
  if (b.free_next != 0) records_[b.free_next].free_prev = b.free_prev;
  std::uint32_t& head = heads_[c.fl][c.sl];
  if (head == index) head = b.free_next;
  if (head == 0) {
    sl_bitmap_[c.fl] &= ~(1u << c.sl);
    if (sl_bitmap_[c.fl] == 0) fl_bitmap_ &= ~(1u << c.fl);
  }
  b.free_prev = b.free_next = 0;
}

std::uint32_t block_allocator::find_free(std::uint32_t granules) const noexcept {
  // Round the request up to the next class boundary: every block listed there or above fits.
  std::uint64_t rounded = granules;
  if (granules >= sl_count) rounded += (std::uint64_t{1} << (floor_log2(granules) - sl_bits)) - 1;
  const size_class c = class_of(rounded);
  if (c.fl < fl_count) {
    int fl = c.fl;
    std::uint32_t sl_map = sl_bitmap_[fl] & (~0u << c.sl);
    if (sl_map == 0) {
      const std::uint32_t fl_map = fl + 1 < fl_count ? fl_bitmap_ & (~0u << (fl + 1)) : 0;
      if (fl_map != 0) {
        fl = __builtin_ctz(fl_map);
        sl_map = sl_bitmap_[fl];
      }
    }
    if (sl_map != 0) return heads_[fl][__builtin_ctz(sl_map)];
  }
  // Blocks of the request's own class straddle it; scan that one list so OOM is exact.
  const size_class own = class_of(granules);
  for (std::uint32_t i = heads_[own.fl][own.sl]; i != 0; i = records_[i].free_next) {
    if (records_[i].size >= granules) return i;
  }
  return 0;
}

std::uint32_t block_allocator::allocate(std::uint32_t granules) noexcept {
  if (granules == 0 || granules > granules_) return no_block;
  const std::uint32_t index = find_free(granules);
  if (index == 0) return no_block;
  remove_free(index);
  block_record& b = records_[index];
  if (b.size > granules) {
    // Without a spare record the remainder cannot be tracked: hand out the whole block.
    if (const std::uint32_t rest_index = new_record(); rest_index != 0) {
      block_record& rest = records_[rest_index];
      rest.start = b.start + granules;
      rest.size = b.size - granules;
      rest.state = block_state::free;
      rest.phys_prev = index;
      rest.phys_next = b.phys_next;
      if (b.phys_next != 0) records_[b.phys_next].phys_prev = rest_index;
      b.phys_next = rest_index;
      b.size = granules;
      insert_free(rest_index);
    }
  }
  b.state = block_state::live;
  owner_[b.start] = index;
  in_use_ += b.size;
  return b.start;
}

block_state block_allocator::state_at(std::uint32_t start) const noexcept {
  if (start >= granules_ || owner_[start] == 0) return block_state::unused;
  return records_[owner_[start]].state;
}

std::uint32_t block_allocator::size_at(std::uint32_t start) const noexcept {
  if (start >= granules_ || owner_[start] == 0) return 0;
  return records_[owner_[start]].size;
}

block_allocator::span block_allocator::free_after(std::uint32_t start) const noexcept {
  if (start >= granules_ || owner_[start] == 0) return {};
  const std::uint32_t next = records_[owner_[start]].phys_next;
  if (next == 0 || records_[next].state != block_state::free) return {};
  return {records_[next].start, records_[next].size};
}

bool block_allocator::mark_pending(std::uint32_t start) noexcept {
  if (state_at(start) != block_state::live) return false;
  records_[owner_[start]].state = block_state::pending_free;
  return true;
}

void block_allocator::absorb(std::uint32_t keep, std::uint32_t gone) noexcept {
  block_record& k = records_[keep];
  const block_record& g = records_[gone];
  k.size += g.size;
  k.phys_next = g.phys_next;
  if (g.phys_next != 0) records_[g.phys_next].phys_prev = keep;
  recycle(gone);
}

block_allocator::span block_allocator::release(std::uint32_t start) noexcept {
  std::uint32_t index = owner_[start];
  owner_[start] = 0;
  records_[index].state = block_state::free;
  in_use_ -= records_[index].size;
  if (const std::uint32_t prev = records_[index].phys_prev;
      prev != 0 && records_[prev].state == block_state::free) {
    remove_free(prev);
    absorb(prev, index);
    index = prev;
  }
  if (const std::uint32_t next = records_[index].phys_next;
      next != 0 && records_[next].state == block_state::free) {
    remove_free(next);
    absorb(index, next);
  }
  insert_free(index);
  return {records_[index].start, records_[index].size};
}

}  // namespace faultline::core::device::detail
