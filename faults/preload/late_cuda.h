// Late CUDA calls: the preloaded agent as the process's CUDA injection library (late_cuda.cc).
#pragma once

namespace faultline::agent {

/// Called by the preload's exit hooks (main returned, exit() began): from now on, CUDA runtime and
/// driver calls answered "unloading" / "deinitialized" are recorded in late-cuda.PID. Does
/// nothing more until CUDA has called InitializeInjection (it enables the callbacks then).
void arm_late_cuda() noexcept;

}  // namespace faultline::agent
