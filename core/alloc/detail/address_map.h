// Private: live blocks by address — an open-addressing hash map (linear probing, backward-shift
// deletion, no tombstones) from a block's address to its node. One array, no allocation per
// insert; it doubles when half full. Address 0 marks an empty slot (no block lives at 0).
//
// Thread safety: none; the pool's mutex guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace faultline::core::alloc::detail {

struct block_node;

class address_map {
 public:
  /// The node for `address`, or nullptr.
  [[nodiscard]] block_node* find(std::uintptr_t address) const noexcept {
    if (size_ == 0) return nullptr;
    for (std::size_t i = home(address);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.address == address) return s.node;
      if (s.address == 0) return nullptr;
    }
  }

  /// Adds `address` (non-zero, not present).
  void insert(std::uintptr_t address, block_node* node);

  /// Removes `address`; false when it was not present.
  bool erase(std::uintptr_t address) noexcept { return take(address) != nullptr; }

  /// Removes `address` and returns its node (one probe run), or nullptr when absent.
  block_node* take(std::uintptr_t address) noexcept;

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  void clear() noexcept;

  /// Calls f(address, node) for every entry.
  template <class F>
  void for_each(F&& f) const {
    for (const slot& s : slots_) {
      if (s.address != 0) f(s.address, s.node);
    }
  }

 private:
  struct slot {
    std::uintptr_t address = 0;
    block_node* node = nullptr;
  };

  // Fibonacci hashing: the product's top bits mix every bit of the (256-aligned) address.
  [[nodiscard]] std::size_t home(std::uintptr_t address) const noexcept {
    return static_cast<std::size_t>((address * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  void grow();

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace faultline::core::alloc::detail
