// The cuda backend when faultline was configured without the CUDA toolkit (FAULTLINE_CUDA=OFF
// or no toolkit found): selecting it is an error value, and FAULTLINE_DEVICE=auto picks the sim.
#include "core/device/device.h"

namespace faultline::core::device {

result<backend*> cuda() noexcept {
  return status(errc::unavailable, "cuda backend: built without the CUDA toolkit");
}

}  // namespace faultline::core::device
