// Caps the bytes allocated through a resource.
//
// The adaptor wraps an upstream resource (not owned) and charges every allocation to a
// `byte_account` before forwarding it: the charge is counted first and rolled back when the
// upstream fails, so the account stays exact even when allocations fail. The account is an
// interface so the same adaptor can charge a per-adaptor counter (`local_byte_account`, the
// default) or a region shared by several processes (the shared accounting region, DESIGN.md §5.3).
// Byte counts are the sizes callers passed.
//
//   alloc::limiting_adaptor capped(pool, 64 << 20);      // at most 64 MiB live through `capped`
//   auto p = capped.allocate(80 << 20, stream);           // out_of_memory, nothing charged
//
//   alloc::local_byte_account shared(1 << 30);            // one budget for two resources
//   alloc::limiting_adaptor a(pool0, shared), b(pool1, shared);
//
// Thread safety: every member may be called from any thread. Concurrent charges may briefly
// over-count (add, check, roll back), so one of two racing allocations near the limit can be
// refused although the other then fails too; the totals are exact once they return.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/alloc/device_memory_resource.h"

namespace faultline::core::alloc {

/// Where a limiting_adaptor charges its bytes.
class byte_account {
 public:
  virtual ~byte_account() = default;
  /// Adds `bytes` unless that would pass the limit. Errors: out_of_memory naming the limit, the
  /// bytes in use and the request (nothing is charged then).
  virtual status charge(std::size_t bytes) noexcept = 0;
  /// Takes back `bytes` charged earlier.
  virtual void uncharge(std::size_t bytes) noexcept = 0;
  /// Bytes charged now.
  [[nodiscard]] virtual std::size_t charged_bytes() const noexcept = 0;
  /// The cap.
  [[nodiscard]] virtual std::size_t limit_bytes() const noexcept = 0;
};

/// A byte_account held in this process: one atomic counter and a fixed cap.
class local_byte_account final : public byte_account {
 public:
  explicit local_byte_account(std::size_t limit_bytes) noexcept : limit_bytes_(limit_bytes) {}
  status charge(std::size_t bytes) noexcept override;
  void uncharge(std::size_t bytes) noexcept override;
  [[nodiscard]] std::size_t charged_bytes() const noexcept override {
    return charged_.load(std::memory_order_acquire);
  }
  [[nodiscard]] std::size_t limit_bytes() const noexcept override { return limit_bytes_; }

 private:
  const std::size_t limit_bytes_;
  std::atomic<std::size_t> charged_{0};
};

/// Forwards to an upstream within a byte budget. See the file comment.
class limiting_adaptor final : public device_memory_resource {
 public:
  /// Caps `upstream` (must outlive the adaptor) at `limit_bytes`, charged to an account the
  /// adaptor owns.
  limiting_adaptor(device_memory_resource& upstream, std::size_t limit_bytes);
  /// Charges `account` (not owned; must outlive the adaptor), which may be shared.
  limiting_adaptor(device_memory_resource& upstream, byte_account& account) noexcept;

  /// Bytes charged to the account now (by every resource sharing it).
  [[nodiscard]] std::size_t allocated_bytes() const noexcept { return account_->charged_bytes(); }
  /// The account's cap.
  [[nodiscard]] std::size_t limit_bytes() const noexcept { return account_->limit_bytes(); }
  /// Allocations this adaptor refused because the account was full.
  [[nodiscard]] std::uint64_t refused_count() const noexcept { return refused_.load(std::memory_order_acquire); }

  /// The wrapped resource.
  [[nodiscard]] device_memory_resource& upstream() const noexcept { return upstream_; }

 private:
  result<void*> do_allocate(std::size_t bytes, device::stream s) noexcept override;
  status do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept override;

  device_memory_resource& upstream_;
  std::unique_ptr<local_byte_account> owned_;
  byte_account* account_;
  std::atomic<std::uint64_t> refused_{0};
};

}  // namespace faultline::core::alloc
