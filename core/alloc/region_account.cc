#include "core/alloc/region_account.h"

namespace faultline::core::alloc {

status region_byte_account::charge(std::size_t bytes) noexcept { return region_.charge(device_, kind_, bytes); }

void region_byte_account::uncharge(std::size_t bytes) noexcept {
  // Only bytes this account charged come back here, so the release cannot exceed the slot's.
  (void)region_.release(device_, kind_, bytes);
}

std::size_t region_byte_account::charged_bytes() const noexcept {
  auto used = region_.usage(device_);
  return used ? static_cast<std::size_t>(*used) : 0;
}

std::size_t region_byte_account::limit_bytes() const noexcept {
  return static_cast<std::size_t>(region_.limit_bytes(device_));
}

}  // namespace faultline::core::alloc
