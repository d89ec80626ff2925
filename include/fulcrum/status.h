// Error handling used at every module boundary inside fulcrum.
//
// A Status carries a code and one line of text a user can act on: what went
// wrong, where, the offending value and what to do. Result<T> holds either a
// value or a non-OK Status. Neither throws; neither crosses the C ABI (see
// c_api.h for the ABI's status codes).
#pragma once

#include <cassert>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace fulcrum {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is wrong: bad lengths, sizes, names
  kUnsupported,      // valid input that this strategy cannot serve (e.g. N % 2P != 0)
  kNotFound,         // a file, plugin or strategy that does not exist
  kPermission,       // refused for safety, e.g. a world-writable plugin file
  kInternal,         // a bug in fulcrum, or a plugin's own failure it could not classify
  kPluginFault,      // a plugin broke the ABI's contract: an invalid answer or text, a write
                     // into memory it borrowed; the plugin's fault, named, not fulcrum's
};

// The code's name as messages print it ("invalid argument").
inline const char* status_code_name(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kPermission:
      return "permission denied";
    case StatusCode::kInternal:
      return "internal error";
    case StatusCode::kPluginFault:
      return "plugin fault";
  }
  return "unknown";
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const noexcept { return code_ == StatusCode::kOk; }
  explicit operator bool() const noexcept { return is_ok(); }
  StatusCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
inline Status unsupported(std::string message) {
  return {StatusCode::kUnsupported, std::move(message)};
}
inline Status not_found(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
inline Status internal_error(std::string message) {
  return {StatusCode::kInternal, std::move(message)};
}
inline Status plugin_fault(std::string message) {
  return {StatusCode::kPluginFault, std::move(message)};
}

// User-supplied text (a name, a key, a value) as quoted in a message:
// 'text', with line breaks, tabs and every other control character escaped
// (\n, \r, \t, \xHH) so that the message stays one line, and cut after
// max_bytes with "...".
inline std::string quote_text(std::string_view text, std::size_t max_bytes = 80) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (const char c : text.substr(0, max_bytes)) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  if (text.size() > max_bytes) out += "...";
  out += "'";
  return out;
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : state_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(state_).is_ok() && "a Result holds a value or an error");
  }

  bool is_ok() const noexcept { return std::holds_alternative<T>(state_); }
  explicit operator bool() const noexcept { return is_ok(); }

  const T& value() const& { return std::get<T>(state_); }
  T& value() & { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(state_); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace fulcrum
