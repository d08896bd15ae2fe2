// Errors as values for faultline's core and everything above it.
//
// A `status` carries an error code, a message, and whether the failure was injected by a fault
// point (so injected failures are never counted as real ones). `result<T>` is a value or a status.
// System errors convert in one place: `status::from_errno`.
//
//   core::result<void*> r = resource.allocate(1024, stream);
//   if (!r) return r.error();          // propagate
//   use(*r);
//
// Thread safety: values; no shared state.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace faultline::core {

/// Error codes shared by every component.
enum class errc : int {
  ok = 0,
  invalid_argument,   ///< the caller passed something malformed
  out_of_memory,      ///< the device or a limit refused an allocation
  runtime_unloading,  ///< the device runtime has been torn down (process exit)
  context_reset,      ///< a handle belongs to a device context that was reset
  not_ready,          ///< asynchronous work is still pending (event query)
  timeout,            ///< a bounded wait expired
  busy,               ///< the resource is held by someone else
  refused,            ///< the component is shutting down and takes no new work
  not_found,
  already_exists,
  io_error,           ///< a system call failed (message carries errno text)
  corrupt,            ///< a file or region failed validation
  unavailable,        ///< a backend or device is not present
  injected,           ///< a fault point fired without a more specific code
  internal,
};

/// Stable lower-case name of an error code ("out_of_memory").
std::string_view to_string(errc code) noexcept;

/// The outcome of an operation: ok, or a code with a message.
class status {
 public:
  status() noexcept = default;
  status(errc code, std::string message, bool injected = false)
      : code_(code), message_(std::move(message)), injected_(injected) {}

  static status ok() noexcept { return {}; }
  /// Converts an errno value; `what` names the failed operation ("open /dev/shm/x").
  static status from_errno(int err, std::string_view what);
  /// An injected failure: `err` is the fault's code (an errno value or a number).
  static status injected_fault(std::string_view point, int err);

  [[nodiscard]] bool is_ok() const noexcept { return code_ == errc::ok; }
  explicit operator bool() const noexcept { return is_ok(); }
  [[nodiscard]] errc code() const noexcept { return code_; }
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  [[nodiscard]] bool injected() const noexcept { return injected_; }
  /// "code: message" (and " [injected]" when injected).
  [[nodiscard]] std::string to_string() const;

 private:
  errc code_ = errc::ok;
  std::string message_;
  bool injected_ = false;
};

/// A value of type T or a non-ok status.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  result(status s) : v_(std::move(s)) {}     // NOLINT(google-explicit-constructor)
  result(errc code, std::string message) : v_(status(code, std::move(message))) {}

  [[nodiscard]] bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  /// The error; ok() when a value is held.
  [[nodiscard]] status error() const { return has_value() ? status::ok() : std::get<1>(v_); }
  [[nodiscard]] errc code() const noexcept { return has_value() ? errc::ok : std::get<1>(v_).code(); }

 private:
  std::variant<T, status> v_;
};

}  // namespace faultline::core
