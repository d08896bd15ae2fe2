#include "core/device/device.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace faultline::core::device {

result<selection> parse_selection(std::string_view text) noexcept {
  if (text.empty() || text == "auto") return selection::automatic;
  if (text == "sim") return selection::sim;
  if (text == "cuda") return selection::cuda;
  return status(errc::invalid_argument,
                "FAULTLINE_DEVICE='" + std::string(text) + "': expected auto, sim or cuda");
}

namespace {

result<backend*> choose() noexcept {
  const char* env = std::getenv("FAULTLINE_DEVICE");
  auto sel = parse_selection(env ? env : "");
  if (!sel) return sel.error();
  switch (*sel) {
    case selection::sim: return &sim();
    case selection::cuda: {
      auto c = cuda();
      if (!c) return c.error();
      auto n = (*c)->device_count();
      if (!n) return status(errc::unavailable, "FAULTLINE_DEVICE=cuda: " + n.error().to_string());
      if (*n == 0) return status(errc::unavailable, "FAULTLINE_DEVICE=cuda: no CUDA device");
      return *c;
    }
    case selection::automatic: {
      auto c = cuda();
      if (c) {
        auto n = (*c)->device_count();
        if (n && *n > 0) return *c;
      }
      return &sim();
    }
  }
  return &sim();
}

}  // namespace

result<backend*> select_backend() noexcept {
  // Computed once: the choice must not change under a running process.
  static const result<backend*> chosen = choose();
  return chosen;
}

backend& current() noexcept {
  auto b = select_backend();
  if (!b) {
    std::fprintf(stderr, "faultline: %s\n", b.error().to_string().c_str());
    std::abort();
  }
  return **b;
}

}  // namespace faultline::core::device
