// A byte_account that charges the shared accounting region (core/accounting, DESIGN.md §5.3):
// a limiting_adaptor over it caps what every process on the node allocates on one device, not
// only this one. The OOM decision is the region's (lock-free add, check against the device's
// limit, roll back on refusal), the bytes go to this process's slot as `data` (or another kind),
// and the region's exit cleanup and dead-process repair give them back when a process ends.
//
//   auto r = accounting::region::create_or_attach(path, opts);   // limits per device
//   (*r)->register_process();
//   alloc::region_byte_account account(**r, /*device=*/0);
//   alloc::limiting_adaptor capped(pool, account);
//   capped.allocate(1 << 30, stream);     // out_of_memory when the node's device 0 is full
//
// Thread safety: as the region (any thread). The region must outlive the account.
#pragma once

#include <cstdint>

#include "core/accounting/region.h"
#include "core/alloc/limiting_adaptor.h"

namespace faultline::core::alloc {

class region_byte_account final : public byte_account {
 public:
  /// Charges `k` on `device` of `r` (registered with register_process() by the caller).
  region_byte_account(accounting::region& r, std::uint32_t device,
                      accounting::kind k = accounting::kind::data) noexcept
      : region_(r), device_(device), kind_(k) {}

  /// Errors: out_of_memory (the device's aggregate would pass its limit; nothing charged), and
  /// the region's charge() errors (refused when not registered, ...).
  status charge(std::size_t bytes) noexcept override;
  void uncharge(std::size_t bytes) noexcept override;
  /// The device's aggregate: bytes charged by every process using the region.
  [[nodiscard]] std::size_t charged_bytes() const noexcept override;
  [[nodiscard]] std::size_t limit_bytes() const noexcept override;

 private:
  accounting::region& region_;
  const std::uint32_t device_;
  const accounting::kind kind_;
};

}  // namespace faultline::core::alloc
