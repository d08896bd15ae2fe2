// The open sets of point names that the families of faults/families.h refer to, as tables
// generated when faultline was built (faults/CMakeLists.txt): the names libfiu's POSIX preload
// defines (place_set::fiu_posix: posix/io/oc/open, libc/mm/malloc) and the CUDA driver and
// runtime function names of the toolkit's headers (place_set::cuda: cuMemFree_v2, cudaFree).
//
//   faults::known_place("posix/io/oc/open");   // yes
//   faults::known_place("posix/io/oc/opne");   // no
//   faults::nearest_place("posix/io/oc/opne"); // "posix/io/oc/open"
//
// Thread safety: constant data.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "faults/families.h"

namespace faultline::faults {

/// Whether the table of family `f` (fiu_posix or cuda) was filled at build time: libfiu's preload
/// or the CUDA headers may have been missing, and then no name of that family is refused.
bool has_place_table(const point_family& f) noexcept;

/// Whether `name` (a whole point name, "cuda/cuMemFree_v2"), or with `prefix` some name starting
/// with it, is a point of its family's table. Families without a table (exact, catalog,
/// symbol) answer true.
bool known_place(std::string_view name, bool prefix = false) noexcept;

/// Levenshtein distance between `a` and `b` (insertions, deletions, substitutions).
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The valid point name nearest to `name` by edit distance: the families' exact names and the
/// generated tables. Empty when none is near (more than a third of the name differs).
std::string nearest_place(std::string_view name);

}  // namespace faultline::faults
