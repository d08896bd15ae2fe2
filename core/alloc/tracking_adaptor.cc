#include "core/alloc/tracking_adaptor.h"

#include <algorithm>
#include <cstdio>

namespace faultline::core::alloc {

tracking_adaptor::tracking_adaptor(device_memory_resource& upstream, std::string name)
    : upstream_(upstream), name_(std::move(name)) {}

tracking_adaptor::~tracking_adaptor() {
  if (outstanding_count() == 0) return;
  std::fputs(report().c_str(), stderr);
}

std::vector<tracked_allocation> tracking_adaptor::outstanding() const {
  std::vector<tracked_allocation> out;
  {
    std::lock_guard lock(mu_);
    out.reserve(live_.size());
    for (const auto& [ptr, e] : live_) out.push_back({ptr, e.bytes, e.stream, e.sequence});
  }
  std::sort(out.begin(), out.end(),
            [](const tracked_allocation& a, const tracked_allocation& b) { return a.sequence < b.sequence; });
  return out;
}

std::size_t tracking_adaptor::outstanding_count() const noexcept {
  std::lock_guard lock(mu_);
  return live_.size();
}

std::size_t tracking_adaptor::outstanding_bytes() const noexcept {
  std::lock_guard lock(mu_);
  return live_bytes_;
}

std::string tracking_adaptor::report(std::size_t max_lines) const {
  const auto live = outstanding();
  std::size_t bytes = 0;
  for (const auto& a : live) bytes += a.bytes;
  char line[256];
  std::snprintf(line, sizeof line, "faultline: %s: %zu allocation(s) (%zu bytes) outstanding\n", name_.c_str(),
                live.size(), bytes);
  std::string out = line;
  for (std::size_t i = 0; i < live.size() && i < max_lines; ++i) {
    std::snprintf(line, sizeof line, "  #%llu %p %zu bytes stream %p\n",
                  static_cast<unsigned long long>(live[i].sequence), live[i].ptr, live[i].bytes,
                  live[i].stream.native);
    out += line;
  }
  if (live.size() > max_lines) out += "  ... " + std::to_string(live.size() - max_lines) + " more\n";
  return out;
}

result<void*> tracking_adaptor::do_allocate(std::size_t bytes, device::stream s) noexcept {
  auto p = upstream_.allocate(bytes, s);
  if (!p) return p;
  std::lock_guard lock(mu_);
  live_.insert_or_assign(*p, entry{bytes, s, next_sequence_++});
  live_bytes_ += bytes;
  return p;
}

status tracking_adaptor::do_deallocate(void* ptr, std::size_t bytes, device::stream s) noexcept {
  entry taken;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%p", ptr);
      return status(errc::invalid_argument, name_ + ": deallocate: " + buf +
                                                " is not a live allocation (double free or foreign pointer)");
    }
    if (it->second.bytes != bytes) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%p", ptr);
      return status(errc::invalid_argument, name_ + ": deallocate: " + buf + " was allocated with " +
                                                std::to_string(it->second.bytes) + " bytes, freed with " +
                                                std::to_string(bytes));
    }
    // Taken out before the upstream call so a concurrent double free of the same pointer is
    // rejected here rather than reaching the upstream twice.
    taken = it->second;
    live_.erase(it);
    live_bytes_ -= bytes;
  }
  auto st = upstream_.deallocate(ptr, bytes, s);
  if (!st) {
    std::lock_guard lock(mu_);
    live_.emplace(ptr, taken);  // the upstream kept it: still live
    live_bytes_ += bytes;
  }
  return st;
}

}  // namespace faultline::core::alloc
