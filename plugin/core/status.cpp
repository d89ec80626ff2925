#include "fulcrum/status.h"

namespace fulcrum {

const char* status_code_name(StatusCode code) noexcept {
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
  }
  return "unknown";
}

}  // namespace fulcrum
