// Private: live blocks by address — a hash table of intrusive chains. A bucket holds the first
// live node whose address hashes there and each node links to the next (`block_node::live_next`),
// so an insert is a push and a take unlinks the node it finds: no allocation, no probing, no
// moving other entries. It doubles when it holds more than a quarter as many nodes as buckets
// (8 bytes a bucket: 32 to 64 bytes per live block), so nearly every chain is one node long and
// the loops below run the same way every time (an open-addressing table at a quarter full
// mispredicted a branch about once per take, in its backward-shift deletion).
// The pool makes one insert per allocate and one take per deallocate; both are inline.
//
// Thread safety: none; the pool's mutex guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/alloc/detail/free_list.h"

namespace faultline::core::alloc::detail {

class address_map {
 public:
  /// The node for `address`, or nullptr.
  [[nodiscard]] block_node* find(std::uintptr_t address) const noexcept {
    if (size_ == 0) return nullptr;
    block_node* n = buckets_[home(address)];
    while (n != nullptr && n->address != address) n = n->live_next;
    return n;
  }

  /// Adds `node` under its address (non-zero, not present). The map uses node->live_next until
  /// the node is taken out again.
  void insert(block_node* node) {
    if (size_ >= buckets_.size() / 4) grow();
    block_node*& head = buckets_[home(node->address)];
    node->live_next = head;
    head = node;
    ++size_;
  }

  /// Removes `address` and returns its node, or nullptr when absent.
  block_node* take(std::uintptr_t address) noexcept {
    if (size_ == 0) return nullptr;
    block_node** link = &buckets_[home(address)];
    while (*link != nullptr && (*link)->address != address) link = &(*link)->live_next;
    block_node* const n = *link;
    if (n == nullptr) return nullptr;
    *link = n->live_next;
    --size_;
    return n;
  }

  /// Removes `address`; false when it was not present.
  bool erase(std::uintptr_t address) noexcept { return take(address) != nullptr; }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// Forgets every node (without touching them).
  void clear() noexcept;

  /// Calls f(address, node) for every entry.
  template <class F>
  void for_each(F&& f) const {
    for (block_node* head : buckets_) {
      for (block_node* n = head; n != nullptr; n = n->live_next) f(n->address, n);
    }
  }

 private:
  // Fibonacci hashing: the product's top bits mix every bit of the (256-aligned) address.
  [[nodiscard]] std::size_t home(std::uintptr_t address) const noexcept {
    return static_cast<std::size_t>((address * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  void grow();

  std::vector<block_node*> buckets_;
  unsigned shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace faultline::core::alloc::detail
