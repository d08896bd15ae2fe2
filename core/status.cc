#include "core/status.h"

#include <cstring>

namespace faultline::core {

std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid_argument";
    case errc::out_of_memory: return "out_of_memory";
    case errc::runtime_unloading: return "runtime_unloading";
    case errc::context_reset: return "context_reset";
    case errc::not_ready: return "not_ready";
    case errc::timeout: return "timeout";
    case errc::busy: return "busy";
    case errc::refused: return "refused";
    case errc::not_found: return "not_found";
    case errc::already_exists: return "already_exists";
    case errc::io_error: return "io_error";
    case errc::corrupt: return "corrupt";
    case errc::unavailable: return "unavailable";
    case errc::injected: return "injected";
    case errc::internal: return "internal";
  }
  return "unknown";
}

status status::from_errno(int err, std::string_view what) {
  errc code = errc::io_error;
  switch (err) {
    case ENOMEM: code = errc::out_of_memory; break;
    case EINVAL: code = errc::invalid_argument; break;
    case ENOENT: code = errc::not_found; break;
    case EEXIST: code = errc::already_exists; break;
    case ETIMEDOUT: code = errc::timeout; break;
    case EBUSY: code = errc::busy; break;
    default: break;
  }
  char buf[128];
  // GNU strerror_r returns the message pointer (which may not be buf).
  const char* text = strerror_r(err, buf, sizeof buf);
  return status(code, std::string(what) + ": " + text);
}

status status::injected_fault(std::string_view point, int err) {
  errc code = err == ENOMEM ? errc::out_of_memory : errc::injected;
  return status(code, "fault point " + std::string(point) + " fired (code " + std::to_string(err) + ")",
                /*injected=*/true);
}

std::string status::to_string() const {
  std::string s(core::to_string(code_));
  if (!message_.empty()) s += ": " + message_;
  if (injected_) s += " [injected]";
  return s;
}

}  // namespace faultline::core
