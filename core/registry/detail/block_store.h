// The registry's host block store (private): saved blocks by key, each with the number of leases
// that pin it. A block's bytes are immutable once stored and shared by pointer, so a load copying
// from a block never races a save replacing it, and an abandoned worker keeps what it reads alive.
// A block's buffer goes back to a host_pool when the last reference to the block drops.
//
//   block_store s;
//   s.put(42, std::make_shared<const stored_block>(...));
//   auto b = s.get(42);               // shared_ptr, nullptr when absent
//   s.pin(42); s.unpin(42, 1);        // leases
//
// Thread safety: every member may be called from any thread (one mutex, held only for map work).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/registry/registry.h"
#include "core/status.h"

namespace faultline::core::registry::detail {

class host_pool;

struct stored_block {
  stored_block() = default;
  /// Gives `data` back to `pool` (when set) for the next save of the same size.
  ~stored_block();
  stored_block(const stored_block&) = delete;
  stored_block& operator=(const stored_block&) = delete;

  std::unique_ptr<std::byte[]> data;
  std::size_t bytes = 0;
  std::uint64_t checksum = 0;
  std::uint64_t saved_by = 0;  ///< generation
  host_pool* pool = nullptr;   ///< outlives the block (both live in the registry's shared core)
};

/// Host buffers of blocks that were replaced or erased, kept for the next save of the same size
/// (KV blocks come in a few fixed sizes), so a steady stream of saves writes into memory that is
/// already mapped instead of faulting fresh pages in. Bounded: beyond `capacity_bytes` a returned
/// buffer is freed.
class host_pool {
 public:
  explicit host_pool(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}
  /// A buffer of exactly `bytes`, recycled when one is free; nullptr when memory runs out.
  std::unique_ptr<std::byte[]> take(std::size_t bytes);
  void give(std::unique_ptr<std::byte[]> data, std::size_t bytes) noexcept;
  [[nodiscard]] std::size_t pooled_bytes() const;

 private:
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<std::unique_ptr<std::byte[]>>> free_;
  std::size_t pooled_ = 0;
};

class block_store {
 public:
  /// Stores (or replaces) `key`; a replaced block keeps its leases.
  void put(std::uint64_t key, std::shared_ptr<const stored_block> block);
  [[nodiscard]] std::shared_ptr<const stored_block> get(std::uint64_t key) const;
  [[nodiscard]] std::optional<block_info> info(std::uint64_t key) const;
  /// One more lease on `key`. Errors: not_found.
  status pin(std::uint64_t key);
  /// `count` fewer leases on `key` (never below zero). Returns how many were dropped.
  std::uint32_t unpin(std::uint64_t key, std::uint32_t count) noexcept;
  /// Errors: not_found, busy (leased).
  status erase(std::uint64_t key);

  struct totals {
    std::uint64_t blocks = 0;
    std::uint64_t bytes = 0;
    std::uint64_t leases = 0;
  };
  [[nodiscard]] totals sum() const;

 private:
  struct entry {
    std::shared_ptr<const stored_block> block;
    std::uint32_t leases = 0;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, entry> map_;
  std::uint64_t bytes_ = 0;
  std::uint64_t leases_ = 0;
};

}  // namespace faultline::core::registry::detail
