#include "faults/preload/posix_points.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "faults/preload/detail/plan_table.h"
#include "faults/preload/detail/text.h"
#include "faults/preload/preload_points.h"

namespace {

namespace detail = faultline::agent::detail;
namespace preload = faultline::agent::preload;

constexpr unsigned max_spec = 4096;
char spec_copy[max_spec + 1];
detail::plan_table<16> items;
// A wrapped call made while deciding (on this thread) is never failed. The callback's own writes
// (points.PID) are system calls that do not come here (detail/sys.h); libfiu's wrappers also skip
// calls made inside one of theirs. initial-exec: the agent is loaded at start, and needs no
// __tls_get_addr (nothing of ld.so).
[[gnu::tls_model("initial-exec")]] __thread bool deciding = false;

// libfiu's external callback (fiu-control.h): nonzero fails the point, with *failinfo as the
// errno the POSIX preload sets.
int decide(const char* name, int* failnum, void** failinfo, unsigned int*) {
  if (deciding) return 0;
  deciding = true;
  int fail = 0;
  const int item = items.find(spec_copy, name);
  if (item >= 0) {
    const detail::point_term t = items.hit(item, &preload::draw, &preload::record_reached);
    if (t.action == detail::point_action::fail) {
      *failnum = 1;
      *failinfo = t.code > 1 ? reinterpret_cast<void*>(static_cast<std::intptr_t>(t.code)) : nullptr;
      fail = 1;
    } else {
      preload::act(t, name);
    }
  }
  deciding = false;
  return fail;
}

using external_cb = int (*)(const char*, int*, void**, unsigned int*);
using enable_external_fn = int (*)(const char*, int, void*, unsigned int, external_cb);
using init_fn = int (*)(unsigned int);

bool names_posix(const char* pattern, std::size_t n) {
  return (n >= 6 && std::strncmp(pattern, "posix/", 6) == 0) || (n >= 5 && std::strncmp(pattern, "libc/", 5) == 0);
}

}  // namespace

namespace faultline::agent::posix_points {

bool install(const char* spec) noexcept {
  if (spec == nullptr || std::strlen(spec) > max_spec) return false;
  if (std::strstr(spec, "posix/") == nullptr && std::strstr(spec, "libc/") == nullptr) return false;
  auto enable = reinterpret_cast<enable_external_fn>(::dlsym(RTLD_DEFAULT, "fiu_enable_external"));
  auto init = reinterpret_cast<init_fn>(::dlsym(RTLD_DEFAULT, "fiu_init"));
  if (enable == nullptr || init == nullptr) {
    detail::fd_writer err(STDERR_FILENO);
    err.str("faultline-agent: posix/ and libc/ points need libfiu's fiu_posix_preload.so preloaded; not enabled\n");
    return false;
  }
  std::memcpy(spec_copy, spec, std::strlen(spec) + 1);
  (void)init(0);
  bool any = false;
  // Each item "pattern=terms": enable its pattern (libfiu's wildcard is a trailing '*' too).
  detail::for_each_item(spec_copy, [&](const char* at, std::size_t n) {
    if (!names_posix(at, n) || n >= 256) return;
    char pattern[256];
    std::memcpy(pattern, at, n);
    pattern[n] = '\0';
    any = enable(pattern, 1, nullptr, 0, &decide) == 0 || any;
  });
  return any;
}

}  // namespace faultline::agent::posix_points
