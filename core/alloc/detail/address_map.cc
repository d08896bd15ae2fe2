#include "core/alloc/detail/address_map.h"

#include <bit>
#include <utility>

namespace faultline::core::alloc::detail {

void address_map::insert(std::uintptr_t address, block_node* node) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  std::size_t i = home(address);
  while (slots_[i].address != 0) i = (i + 1) & mask_;
  slots_[i] = {address, node};
  ++size_;
}

block_node* address_map::take(std::uintptr_t address) noexcept {
  if (size_ == 0) return nullptr;
  std::size_t i = home(address);
  while (slots_[i].address != address) {
    if (slots_[i].address == 0) return nullptr;
    i = (i + 1) & mask_;
  }
  block_node* const found = slots_[i].node;
  // Backward shift: pull later entries of the probe run into the hole unless that would move
  // one before its home slot.
  for (std::size_t j = (i + 1) & mask_; slots_[j].address != 0; j = (j + 1) & mask_) {
    const std::size_t k = home(slots_[j].address);
    const bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i] = slot{};
  --size_;
  return found;
}

void address_map::clear() noexcept {
  for (slot& s : slots_) s = slot{};
  size_ = 0;
}

void address_map::grow() {
  const std::size_t capacity = slots_.empty() ? 64 : slots_.size() * 2;
  std::vector<slot> old = std::exchange(slots_, std::vector<slot>(capacity));
  mask_ = capacity - 1;
  shift_ = 64u - static_cast<unsigned>(std::countr_zero(capacity));
  size_ = 0;
  for (const slot& s : old) {
    if (s.address != 0) insert(s.address, s.node);
  }
}

}  // namespace faultline::core::alloc::detail
