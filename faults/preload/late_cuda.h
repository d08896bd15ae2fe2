// Late CUDA calls: the preloaded agent as the process's CUDA injection library (late_cuda.cc).
#pragma once

namespace faultline::agent {

/// Called by the preload's exit hooks (main returned, exit() began): from now on, CUDA runtime and
/// driver calls answered "unloading" / "deinitialized" are recorded in late-cuda.PID. Does
/// nothing more until CUDA has called InitializeInjection (it enables the callbacks then).
void arm_late_cuda() noexcept;

/// True when this library's __libc_start_main ran: it was preloaded, and its exit hooks arm
/// late_cuda. False when CUDA loaded it as the injection library into a program that was not
/// started with it (CUDA_INJECTION64_PATH without LD_PRELOAD; `faultline run --late-cuda`
/// preloads it): then InitializeInjection watches from the start (preload.cc).
[[nodiscard]] bool started_main() noexcept;

}  // namespace faultline::agent
