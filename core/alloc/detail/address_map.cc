#include "core/alloc/detail/address_map.h"

#include <bit>
#include <utility>

namespace faultline::core::alloc::detail {

void address_map::clear() noexcept {
  for (block_node*& head : buckets_) head = nullptr;
  size_ = 0;
}

void address_map::grow() {
  const std::size_t capacity = buckets_.empty() ? 64 : buckets_.size() * 2;
  std::vector<block_node*> old = std::exchange(buckets_, std::vector<block_node*>(capacity, nullptr));
  shift_ = 64u - static_cast<unsigned>(std::countr_zero(capacity));
  for (block_node* head : old) {
    for (block_node* n = head; n != nullptr;) {
      block_node* const next = n->live_next;
      block_node*& bucket = buckets_[home(n->address)];
      n->live_next = bucket;
      bucket = n;
      n = next;
    }
  }
}

}  // namespace faultline::core::alloc::detail
