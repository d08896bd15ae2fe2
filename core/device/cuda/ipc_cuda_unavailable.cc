// The cuda backend's IPC bytes when faultline was built without the CUDA toolkit: every entry
// point answers unavailable (no cuda backend can exist to ask for them).
#include "core/device/detail/ipc_bytes.h"

namespace faultline::core::device::ipc::detail {

namespace {
status no_cuda() { return status(errc::unavailable, "ipc (cuda): built without the CUDA toolkit"); }
}  // namespace

result<std::unique_ptr<exported_bytes>> cuda_export(int, std::size_t) noexcept { return no_cuda(); }
result<std::unique_ptr<imported_bytes>> cuda_import(const handle&) noexcept { return no_cuda(); }
status cuda_launch_host_func(stream, void (*)(void*), void*) noexcept { return no_cuda(); }

}  // namespace faultline::core::device::ipc::detail
