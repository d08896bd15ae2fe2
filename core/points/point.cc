#include "core/points/point.h"

namespace faultline::points {

namespace detail {
std::atomic<bool> armed{false};
namespace {
std::atomic<hook_fn> installed{nullptr};
}  // namespace

outcome hit(const char* name) noexcept {
  hook_fn hook = installed.load(std::memory_order_acquire);
  return hook != nullptr ? hook(name) : outcome{};
}
}  // namespace detail

void install_hook(hook_fn hook) noexcept { detail::installed.store(hook, std::memory_order_release); }
void set_armed(bool on) noexcept { detail::armed.store(on, std::memory_order_release); }
bool is_armed() noexcept { return detail::armed.load(std::memory_order_acquire); }

}  // namespace faultline::points
