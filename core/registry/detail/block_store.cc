#include "core/registry/detail/block_store.h"

#include <algorithm>
#include <new>
#include <string>
#include <utility>

namespace faultline::core::registry::detail {

stored_block::~stored_block() {
  if (pool != nullptr && data) pool->give(std::move(data), bytes);
}

std::unique_ptr<std::byte[]> host_pool::take(std::size_t bytes) {
  {
    std::lock_guard g(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end() && !it->second.empty()) {
      auto data = std::move(it->second.back());
      it->second.pop_back();
      pooled_ -= bytes;
      return data;
    }
  }
  return std::unique_ptr<std::byte[]>(new (std::nothrow) std::byte[bytes]);
}

void host_pool::give(std::unique_ptr<std::byte[]> data, std::size_t bytes) noexcept {
  std::lock_guard g(mu_);
  if (pooled_ + bytes > capacity_) return;  // freed on the way out
  try {
    free_[bytes].push_back(std::move(data));
    pooled_ += bytes;
  } catch (const std::bad_alloc&) {
    // the buffer is freed with `data`
  }
}

std::size_t host_pool::pooled_bytes() const {
  std::lock_guard g(mu_);
  return pooled_;
}

void block_store::put(std::uint64_t key, std::shared_ptr<const stored_block> block) {
  // The replaced block is released outside the lock (its bytes may be large).
  std::shared_ptr<const stored_block> old;
  {
    std::lock_guard g(mu_);
    entry& e = map_[key];
    if (e.block) bytes_ -= e.block->bytes;
    bytes_ += block->bytes;
    old = std::exchange(e.block, std::move(block));
  }
}

std::shared_ptr<const stored_block> block_store::get(std::uint64_t key) const {
  std::lock_guard g(mu_);
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : it->second.block;
}

std::optional<block_info> block_store::info(std::uint64_t key) const {
  std::lock_guard g(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  const stored_block& b = *it->second.block;
  return block_info{key, b.bytes, b.checksum, b.saved_by, it->second.leases};
}

status block_store::pin(std::uint64_t key) {
  std::lock_guard g(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return {errc::not_found, "registry: no stored block " + std::to_string(key)};
  ++it->second.leases;
  ++leases_;
  return {};
}

std::uint32_t block_store::unpin(std::uint64_t key, std::uint32_t count) noexcept {
  std::lock_guard g(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return 0;
  const std::uint32_t dropped = std::min(count, it->second.leases);
  it->second.leases -= dropped;
  leases_ -= dropped;
  return dropped;
}

status block_store::erase(std::uint64_t key) {
  std::shared_ptr<const stored_block> old;
  std::lock_guard g(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return {errc::not_found, "registry: no stored block " + std::to_string(key)};
  if (it->second.leases != 0) {
    return {errc::busy, "registry: block " + std::to_string(key) + " has " + std::to_string(it->second.leases) +
                            " outstanding lease(s)"};
  }
  bytes_ -= it->second.block->bytes;
  old = std::move(it->second.block);
  map_.erase(it);
  return {};
}

block_store::totals block_store::sum() const {
  std::lock_guard g(mu_);
  return {map_.size(), bytes_, leases_};
}

}  // namespace faultline::core::registry::detail
