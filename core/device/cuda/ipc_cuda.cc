// The cuda backend's IPC bytes (see core/device/detail/ipc_bytes.h): a memory pool created with
// POSIX file descriptor handles, as the anchor's binding (cuda-python) shares pool allocations.
//
// Exporter: cudaMemPoolCreate (handleTypes = cudaMemHandleTypePosixFileDescriptor) on the pool's
// device, allocations with cudaMallocFromPoolAsync on a private stream, synchronised before the
// pointer is returned (CUDA: an importer must not touch memory whose allocation has not completed
// in the exporter). The first export makes the pool's descriptor
// (cudaMemPoolExportToShareableHandle); each handle carries cudaMemPoolExportPointer's 64 bytes.
//
// Importer: the pool is imported once per process (cudaMemPoolImportFromShareableHandle on this
// process's copy of the descriptor) and each allocation once (cudaMemPoolImportPointer); both are
// reference counted, because the same pool or pointer may be opened twice in one process (a
// re-exported handle of a pointer already imported), which CUDA does not promise to accept.
// Releasing frees the pointer with cudaFree, and the pool (cudaMemPoolDestroy, close) with its
// last pointer, so by the time the registry slot is freed this process holds nothing of it:
// CUDA requires importers to free before the exporter does.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/device/cuda/detail/cuda_status.h"
#include "core/device/detail/ipc_bytes.h"
#include "core/device/detail/ipc_registry.h"

namespace faultline::core::device::ipc::detail {

namespace {

status cuda_error(cudaError_t err, std::string_view what) {
  return core::device::detail::from_cuda(err, std::string("ipc (cuda): ") + std::string(what));
}

// Makes `device` the calling thread's current device for a scope, and restores the previous one.
class device_scope {
 public:
  status enter(int device) noexcept {
    if (cudaError_t e = cudaGetDevice(&previous_); e != cudaSuccess) return cuda_error(e, "cudaGetDevice");
    if (previous_ == device) return {};
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return cuda_error(e, "cudaSetDevice(" + std::to_string(device) + ")");
    }
    switched_ = true;
    return {};
  }
  ~device_scope() {
    if (switched_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool switched_ = false;
};

class cuda_exported final : public exported_bytes {
 public:
  cuda_exported(int device, std::size_t capacity, cudaMemPool_t pool, cudaStream_t stream)
      : device_(device), capacity_(capacity), pool_(pool), stream_(stream) {}
  // No device call from a destructor: destroy() or abandon() ran before.
  ~cuda_exported() override = default;

  result<void*> allocate(std::size_t bytes, std::uint64_t& offset) noexcept override {
    if (used_ + bytes > capacity_ || used_ + bytes < used_) {
      return status(errc::out_of_memory, "ipc (cuda): " + std::to_string(bytes) + " more bytes exceed the pool's " +
                                             std::to_string(capacity_) + " (" + std::to_string(used_) + " in use)");
    }
    device_scope scope;
    if (auto s = scope.enter(device_); !s) return s;
    void* p = nullptr;
    if (cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, pool_, stream_); e != cudaSuccess) {
      return cuda_error(e, "cudaMallocFromPoolAsync of " + std::to_string(bytes) + " bytes");
    }
    if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
      (void)cudaFreeAsync(p, stream_);
      return cuda_error(e, "cudaStreamSynchronize after cudaMallocFromPoolAsync");
    }
    live_[p] = bytes;
    used_ += bytes;
    offset = 0;
    return p;
  }

  status deallocate(void* ptr) noexcept override {
    auto it = live_.find(ptr);
    if (it == live_.end()) return status(errc::invalid_argument, "ipc (cuda): not an allocation of this pool");
    device_scope scope;
    if (auto s = scope.enter(device_); !s) return s;
    if (cudaError_t e = cudaFreeAsync(ptr, stream_); e != cudaSuccess) return cuda_error(e, "cudaFreeAsync");
    used_ -= it->second;
    live_.erase(it);
    if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
      return cuda_error(e, "cudaStreamSynchronize after cudaFreeAsync");
    }
    return {};
  }

  status describe(void* ptr, handle& h) noexcept override {
    device_scope scope;
    if (auto s = scope.enter(device_); !s) return s;
    if (fd_ < 0) {
      int fd = -1;
      if (cudaError_t e = cudaMemPoolExportToShareableHandle(&fd, pool_, cudaMemHandleTypePosixFileDescriptor, 0);
          e != cudaSuccess) {
        return cuda_error(e, "cudaMemPoolExportToShareableHandle");
      }
      // Not inherited by the processes this one starts: only importers hold the pool.
      (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
      fd_ = fd;
    }
    cudaMemPoolPtrExportData data{};
    if (cudaError_t e = cudaMemPoolExportPointer(&data, ptr); e != cudaSuccess) {
      return cuda_error(e, "cudaMemPoolExportPointer");
    }
    static_assert(sizeof data.reserved == sizeof h.export_data);
    std::memcpy(h.export_data, data.reserved, sizeof h.export_data);
    h.memory_fd = fd_;
    return {};
  }

  status destroy() noexcept override {
    device_scope scope;
    status first = scope.enter(device_);
    auto keep = [&first](status s) {
      if (first.is_ok() && !s.is_ok()) first = std::move(s);
    };
    for (const auto& [p, bytes] : live_) {
      if (cudaError_t e = cudaFreeAsync(p, stream_); e != cudaSuccess) keep(cuda_error(e, "cudaFreeAsync at close"));
    }
    live_.clear();
    used_ = 0;
    if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) keep(cuda_error(e, "cudaStreamSynchronize at close"));
    if (cudaError_t e = cudaMemPoolDestroy(pool_); e != cudaSuccess) keep(cuda_error(e, "cudaMemPoolDestroy"));
    if (cudaError_t e = cudaStreamDestroy(stream_); e != cudaSuccess) keep(cuda_error(e, "cudaStreamDestroy"));
    close_fd();
    return first;
  }

  void abandon() noexcept override { close_fd(); }

 private:
  void close_fd() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int device_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  cudaMemPool_t pool_;
  cudaStream_t stream_;
  int fd_ = -1;
  std::map<void*, std::size_t> live_;
};

// What this process imported, shared by every mapping of it. Leaked on purpose: mappings may be
// released from static destructors.
struct imported_pool {
  std::uint64_t pool_id;
  cudaMemPool_t pool;
  int fd;
  int refs;
};
struct imported_pointer {
  std::uint64_t pool_id;
  std::uint32_t allocation;
  std::uint64_t generation;
  void* ptr;
  int refs;
};
struct import_table {
  std::mutex mu;
  std::vector<imported_pool> pools;
  std::vector<imported_pointer> pointers;
};
import_table& imports() {
  static auto* table = new import_table();
  return *table;
}

imported_pool* find_pool(import_table& t, std::uint64_t id) {
  for (auto& p : t.pools) {
    if (p.pool_id == id) return &p;
  }
  return nullptr;
}

// Drops one reference to pool `id`; the last one destroys the imported pool and closes the fd.
status unref_pool(import_table& t, std::uint64_t id) {
  for (auto it = t.pools.begin(); it != t.pools.end(); ++it) {
    if (it->pool_id != id || --it->refs > 0) continue;
    const cudaError_t e = cudaMemPoolDestroy(it->pool);
    ::close(it->fd);
    t.pools.erase(it);
    return e == cudaSuccess ? status{} : cuda_error(e, "cudaMemPoolDestroy of the imported pool");
  }
  return {};
}

class cuda_imported final : public imported_bytes {
 public:
  cuda_imported(const handle& h, void* ptr, int fd) : h_(h), ptr_(ptr), fd_(fd) {}
  [[nodiscard]] void* data() const noexcept override { return ptr_; }
  [[nodiscard]] int memory_fd() const noexcept override { return fd_; }

  status release() noexcept override {
    import_table& t = imports();
    std::lock_guard lock(t.mu);
    device_scope scope;
    status first = scope.enter(h_.device);
    for (auto it = t.pointers.begin(); it != t.pointers.end(); ++it) {
      if (it->ptr != ptr_ || it->pool_id != h_.pool_id) continue;
      if (--it->refs == 0) {
        if (cudaError_t e = cudaFree(ptr_); e != cudaSuccess && first) first = cuda_error(e, "cudaFree of the imported pointer");
        t.pointers.erase(it);
      }
      break;
    }
    if (auto s = unref_pool(t, h_.pool_id); !s && first) first = s;
    return first;
  }

 private:
  handle h_;
  void* ptr_;
  int fd_;
};

}  // namespace

result<std::unique_ptr<exported_bytes>> cuda_export(int device, std::size_t bytes) noexcept {
  device_scope scope;
  if (auto s = scope.enter(device); !s) return s;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  if (cudaError_t e = cudaMemPoolCreate(&pool, &props); e != cudaSuccess) {
    return cuda_error(e, "cudaMemPoolCreate with POSIX file descriptor handles on device " + std::to_string(device));
  }
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    (void)cudaMemPoolDestroy(pool);
    return cuda_error(e, "cudaStreamCreateWithFlags");
  }
  return std::unique_ptr<exported_bytes>(new cuda_exported(device, bytes, pool, stream));
}

result<std::unique_ptr<imported_bytes>> cuda_import(const handle& h) noexcept {
  import_table& t = imports();
  std::lock_guard lock(t.mu);
  device_scope scope;
  if (auto s = scope.enter(h.device); !s) return s;
  imported_pool* p = find_pool(t, h.pool_id);
  if (p == nullptr) {
    auto fd = fetch_descriptor(h, h.memory_fd, /*prefer_pidfd=*/true);
    if (!fd) return fd.error();
    cudaMemPool_t pool = nullptr;
    // For POSIX descriptors the "handle" argument is the descriptor itself, cast to a pointer.
    void* os_handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(*fd));
    if (cudaError_t e = cudaMemPoolImportFromShareableHandle(&pool, os_handle, cudaMemHandleTypePosixFileDescriptor, 0);
        e != cudaSuccess) {
      ::close(*fd);
      return cuda_error(e, "cudaMemPoolImportFromShareableHandle");
    }
    t.pools.push_back({h.pool_id, pool, *fd, 0});
    p = &t.pools.back();
  }
  ++p->refs;
  const int fd = p->fd;
  for (auto& q : t.pointers) {
    if (q.pool_id == h.pool_id && q.allocation == h.allocation && q.generation == h.generation) {
      ++q.refs;
      return std::unique_ptr<imported_bytes>(new cuda_imported(h, q.ptr, fd));
    }
  }
  cudaMemPoolPtrExportData data{};
  std::memcpy(data.reserved, h.export_data, sizeof data.reserved);
  void* ptr = nullptr;
  if (cudaError_t e = cudaMemPoolImportPointer(&ptr, p->pool, &data); e != cudaSuccess) {
    (void)unref_pool(t, h.pool_id);
    return cuda_error(e, "cudaMemPoolImportPointer");
  }
  t.pointers.push_back({h.pool_id, h.allocation, h.generation, ptr, 1});
  return std::unique_ptr<imported_bytes>(new cuda_imported(h, ptr, fd));
}

status cuda_launch_host_func(stream s, void (*fn)(void*), void* arg) noexcept {
  if (fn == nullptr) return status(errc::invalid_argument, "ipc (cuda): launch_host_func with a null function");
  if (cudaError_t e = cudaLaunchHostFunc(static_cast<cudaStream_t>(s.native), fn, arg); e != cudaSuccess) {
    return cuda_error(e, "cudaLaunchHostFunc");
  }
  return {};
}

}  // namespace faultline::core::device::ipc::detail
