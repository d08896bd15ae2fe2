// cuda/<API> fault points for any program (cuda_points.cc): the preloaded agent stands before
// CUDA driver calls and runtime calls of a program that never knew faultline.
//
//   cuda/<driver function>   e.g. cuda/cuMemFree_v2, cuda/cuEventSynchronize, cuda/cuIpcOpenMemHandle
//                            (the exported name, or the base name cuGetProcAddress is asked for):
//                            delay, kill, abort, print, fail(<CUresult name or number>) — the
//                            call is not made and answers that error — and teardown(device|N) —
//                            the device's primary context is reset just before the call.
//   cuda/<runtime function>  e.g. cuda/cudaEventSynchronize (CUPTI's name without its _vNNNN
//                            suffix): delay, kill, abort, print, teardown. CUPTI's callbacks
//                            cannot change a call's result: fail it through the driver call it
//                            makes (the CLI refuses fail on a runtime point and says so).
//
// Driver points reach every driver entry point handed out by dlsym() on libcuda or by the
// driver's cuGetProcAddress — which is how the CUDA runtime (libcudart.so and the static
// libcudart_static.a alike), cuda-python and ctypes users get theirs. A program linked directly
// against libcuda.so binds its calls at load time and is not reached. Runtime points need the
// agent to be the CUDA injection library (CUDA_INJECTION64_PATH, which `faultline exec` sets for
// them) and CUPTI (libcupti.so.13, found like late_cuda.cc finds it). x86-64 only.
#pragma once

namespace faultline::agent::cuda_points {

/// Reads the cuda/ items of FAULTLINE_FAULTS (`spec`, copied). True when there is one: then
/// dlsym() and cuGetProcAddress hand out the point's stub for every driver function an item
/// names, and nothing else changes. Called once, from the preload's constructor.
bool install(const char* spec) noexcept;

/// For late_cuda.cc: whether an item names runtime calls (enable CUPTI for them), and the one
/// that covers a runtime function named by CUPTI ("cudaFree_v3020"), or -1.
bool runtime_points() noexcept;
int runtime_item(const char* cupti_name) noexcept;

/// A call of a runtime function covered by `item`, about to be made (CUPTI's API_ENTER).
void runtime_hit(int item, const char* cupti_name) noexcept;

/// --late-cuda (from the preload's constructor, before CUDA loads): dlsym() and cuGetProcAddress
/// hand out a stub for every driver function, which only jumps on until arm_late().
void watch_late_driver_calls() noexcept;

/// Exit has begun: from now on each stub calls its function and records a call answered
/// CUDA_ERROR_DEINITIALIZED in late-cuda.PID, which the driver answers after its teardown without
/// reporting the call to CUPTI. Nothing without watch_late_driver_calls().
void arm_late() noexcept;

/// late_cuda.cc recorded, through CUPTI, the driver call now returning on this thread: its stub
/// does not record it again.
void note_cupti_recorded() noexcept;

}  // namespace faultline::agent::cuda_points
