// The sim's IPC bytes (see core/device/detail/ipc_bytes.h): the arena is shared memory, a range
// of the registry's memfd, so every process that maps it sees the same bytes, and an importer's
// mapping stays valid whatever the exporter does (the memfd lives while anyone maps it). That
// is the one place where the sim is kinder than CUDA, which is why the waiting close in ipc.cc,
// not the memory, is what keeps importers safe on both backends.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <map>
#include <string>

#include "core/device/detail/ipc_bytes.h"
#include "core/device/detail/ipc_registry.h"

namespace faultline::core::device::ipc::detail {

namespace {

constexpr std::uint64_t granule = 256;

// First fit over the arena with coalescing of address neighbours. Pools hold at most
// max_allocations blocks, so ordered maps are plenty.
class sim_exported final : public exported_bytes {
 public:
  sim_exported(std::byte* base, std::size_t bytes) : base_(base), bytes_(bytes) { free_[0] = bytes; }
  ~sim_exported() override {
    if (base_ != nullptr) ::munmap(base_, bytes_);
  }

  result<void*> allocate(std::size_t bytes, std::uint64_t& offset) noexcept override {
    const std::uint64_t want = (bytes + granule - 1) / granule * granule;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < want) continue;
      offset = it->first;
      const std::uint64_t rest = it->second - want;
      free_.erase(it);
      if (rest != 0) free_[offset + want] = rest;
      live_[offset] = want;
      return static_cast<void*>(base_ + offset);
    }
    return status(errc::out_of_memory, "ipc (sim): no free range of " + std::to_string(want) + " bytes in the " +
                                           std::to_string(bytes_) + "-byte arena");
  }

  status deallocate(void* ptr) noexcept override {
    const auto offset = static_cast<std::uint64_t>(static_cast<std::byte*>(ptr) - base_);
    auto it = live_.find(offset);
    if (it == live_.end()) return status(errc::invalid_argument, "ipc (sim): not an allocation of this pool");
    std::uint64_t start = offset;
    std::uint64_t size = it->second;
    live_.erase(it);
    auto next = free_.lower_bound(start);
    if (next != free_.end() && next->first == start + size) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    free_[start] = size;
    return {};
  }

  status describe(void*, handle& h) noexcept override {
    h.memory_fd = -1;
    return {};
  }

  status destroy() noexcept override {
    ::munmap(base_, bytes_);
    base_ = nullptr;
    live_.clear();
    return {};
  }

  // The exporter's own mapping goes; importers keep theirs (and the memfd with them).
  void abandon() noexcept override { (void)destroy(); }

 private:
  std::byte* base_;
  std::size_t bytes_;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> bytes
  std::map<std::uint64_t, std::uint64_t> live_;
};

class sim_imported final : public imported_bytes {
 public:
  sim_imported(void* map, std::size_t map_bytes, void* data) : map_(map), map_bytes_(map_bytes), data_(data) {}
  ~sim_imported() override {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
  }
  [[nodiscard]] void* data() const noexcept override { return data_; }
  [[nodiscard]] int memory_fd() const noexcept override { return -1; }
  status release() noexcept override {
    if (map_ != nullptr && ::munmap(map_, map_bytes_) != 0) return status::from_errno(errno, "ipc (sim): munmap");
    map_ = nullptr;
    return {};
  }

 private:
  void* map_;
  std::size_t map_bytes_;
  void* data_;
};

}  // namespace

result<std::unique_ptr<exported_bytes>> sim_export(int fd, std::uint64_t arena_offset, std::size_t bytes) noexcept {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(arena_offset));
  if (p == MAP_FAILED) return status::from_errno(errno, "ipc (sim): map the arena");
  return std::unique_ptr<exported_bytes>(new sim_exported(static_cast<std::byte*>(p), bytes));
}

result<std::unique_ptr<imported_bytes>> sim_import(int fd, std::uint64_t arena_offset, const handle& h) noexcept {
  // Only the pages of this allocation: an importer cannot touch its neighbours.
  const std::uint64_t page = page_size();
  const std::uint64_t first = arena_offset + h.offset;
  const std::uint64_t map_start = first / page * page;
  const std::uint64_t map_end = (first + h.bytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, map_end - map_start, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(map_start));
  if (p == MAP_FAILED) return status::from_errno(errno, "ipc (sim): map the imported allocation");
  void* data = static_cast<std::byte*>(p) + (first - map_start);
  return std::unique_ptr<imported_bytes>(new sim_imported(p, map_end - map_start, data));
}

}  // namespace faultline::core::device::ipc::detail
