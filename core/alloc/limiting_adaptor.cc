#include "core/alloc/limiting_adaptor.h"

#include <limits>
#include <string>

namespace faultline::core::alloc {

status local_byte_account::charge(std::size_t bytes) noexcept {
  // Add first, check, roll back on refusal: no lock, and the counter is exact whenever no charge
  // is in flight.
  const std::size_t before = charged_.fetch_add(bytes, std::memory_order_acq_rel);
  const bool wrapped = before > std::numeric_limits<std::size_t>::max() - bytes;
  if (wrapped || before + bytes > limit_bytes_) {
    charged_.fetch_sub(bytes, std::memory_order_acq_rel);
    return status(errc::out_of_memory, "limit of " + std::to_string(limit_bytes_) + " bytes: " +
                                           std::to_string(before) + " in use, " + std::to_string(bytes) +
                                           " more requested");
  }
  return status::ok();
}

void local_byte_account::uncharge(std::size_t bytes) noexcept { charged_.fetch_sub(bytes, std::memory_order_acq_rel); }

limiting_adaptor::limiting_adaptor(device_memory_resource& upstream, std::size_t limit_bytes)
    : upstream_(upstream), owned_(std::make_unique<local_byte_account>(limit_bytes)), account_(owned_.get()) {}

limiting_adaptor::limiting_adaptor(device_memory_resource& upstream, byte_account& account) noexcept
    : upstream_(upstream), account_(&account) {}

result<void*> limiting_adaptor::do_allocate(std::size_t bytes, device::stream s) noexcept {
  if (auto st = account_->charge(bytes); !st) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return status(st.code(), "limiting_adaptor: " + st.message(), st.injected());
  }
  auto p = upstream_.allocate(bytes, s);
  if (!p) account_->uncharge(bytes);  // roll back: the bytes never left the upstream
  return p;
}

status limiting_adaptor::do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept {
  auto st = upstream_.deallocate(ptr, bytes, s);
  if (st) account_->uncharge(bytes);  // a failed free still holds its bytes
  return st;
}

}  // namespace faultline::core::alloc
