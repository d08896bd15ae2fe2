#include "faults/point_names.h"

#include <algorithm>
#include <vector>

#include "faults/nccl_names.h"

namespace faultline::faults {
namespace {

// Generated at configure time (faults/CMakeLists.txt): fiu_posix_names, cuda_driver_names,
// cuda_runtime_names, each a sorted array of string_view (possibly empty).
#include "faults/generated/point_names.inc"

template <std::size_t N>
bool contains(const std::string_view (&table)[N], std::string_view name, bool prefix) {
  if (prefix) return std::any_of(std::begin(table), std::end(table), [&](std::string_view n) { return n.starts_with(name); });
  return std::binary_search(std::begin(table), std::end(table), name);
}

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

bool has_place_table(const point_family& f) noexcept {
  if (f.places == place_set::fiu_posix) return std::size(fiu_posix_names) > 1;
  if (f.places == place_set::cuda) return std::size(cuda_driver_names) > 1 && std::size(cuda_runtime_names) > 1;
  return f.places == place_set::nccl;
}

bool known_place(std::string_view name, bool prefix) noexcept {
  const point_family* f = family_of(name);
  if (f == nullptr || !has_place_table(*f)) return true;
  if (f->places == place_set::fiu_posix) return contains(fiu_posix_names, name, prefix);
  if (f->places == place_set::nccl) {
    const std::string_view api = name.substr(5);  // after "nccl/"
    return std::any_of(std::begin(nccl_function_names) + 1, std::end(nccl_function_names),
                       [&](std::string_view n) { return prefix ? n.starts_with(api) : n == api; });
  }
  std::string_view api = name.substr(5);  // after "cuda/"
  // __CUDA_API_PTDS / _PTSZ: the per-thread-stream entry points of a function.
  if (!prefix && (api.ends_with("_ptds") || api.ends_with("_ptsz"))) api.remove_suffix(5);
  return contains(cuda_driver_names, api, prefix) || contains(cuda_runtime_names, api, prefix);
}

std::string nearest_place(std::string_view name) {
  std::string best;
  std::size_t best_distance = name.size() / 3 + 1;
  auto consider = [&](std::string_view candidate, std::string_view prefix = {}) {
    std::string full = std::string(prefix) + std::string(candidate);
    const std::size_t d = edit_distance(name, full);
    if (d < best_distance) {
      best_distance = d;
      best = std::move(full);
    }
  };
  for (const auto& f : family_table) {
    if (f.exact()) consider(f.name);
  }
  for (auto n : fiu_posix_names) {
    if (!n.empty()) consider(n);
  }
  for (auto n : cuda_driver_names) {
    if (!n.empty()) consider(n, "cuda/");
  }
  for (auto n : cuda_runtime_names) {
    if (!n.empty()) consider(n, "cuda/");
  }
  for (std::size_t i = 1; i < nccl_function_count; ++i) consider(nccl_function_names[i], "nccl/");
  return best;
}

}  // namespace faultline::faults
