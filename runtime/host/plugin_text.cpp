// Text from a plugin. The ABI promises NUL-terminated UTF-8; the host reads at
// most a bound of it and takes it only when it is valid UTF-8 without control
// characters, so that what a plugin says can reach a terminal, a JSON file or
// a metrics line as it is (names and reasons), or escaped (errors and logs).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "plugin_loader_internal.h"

namespace fulcrum::host::detail {
namespace {

// The length of the UTF-8 sequence opening s[0, n) and its code point, or 0
// when it is not valid UTF-8 (a stray continuation byte, an overlong form, a
// surrogate, past U+10FFFF, cut short).
std::size_t utf8_sequence(const unsigned char* s, std::size_t n, char32_t& code_point) {
  const unsigned char lead = s[0];
  std::size_t length = 0;
  char32_t min = 0;
  if (lead < 0x80) {
    code_point = lead;
    return 1;
  }
  if ((lead & 0xe0) == 0xc0) {
    length = 2, min = 0x80, code_point = lead & 0x1f;
  } else if ((lead & 0xf0) == 0xe0) {
    length = 3, min = 0x800, code_point = lead & 0x0f;
  } else if ((lead & 0xf8) == 0xf0) {
    length = 4, min = 0x10000, code_point = lead & 0x07;
  } else {
    return 0;
  }
  if (length > n) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    code_point = (code_point << 6) | (s[i] & 0x3f);
  }
  if (code_point < min || code_point > 0x10ffff || (code_point >= 0xd800 && code_point <= 0xdfff)) {
    return 0;
  }
  return length;
}

// C0 and C1 controls, DEL, and the Unicode line and paragraph separators:
// what would break a line or steer a terminal.
bool is_control(char32_t c) {
  return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0x2028 || c == 0x2029;
}

// The bytes of `text` up to its NUL, reading at most max_bytes + 1 of them;
// `terminated` says whether the NUL came within max_bytes.
std::string_view bounded_text(const char* text, std::size_t max_bytes, bool& terminated) {
  const std::size_t length = ::strnlen(text, max_bytes + 1);
  terminated = length <= max_bytes;
  return {text, std::min(length, max_bytes)};
}

}  // namespace

// `text` as the ABI promises it, or why not (what a message says after the
// field's name).
Result<std::string> checked_text(const char* text, std::size_t max_bytes) {
  bool terminated = false;
  const std::string_view view = bounded_text(text, max_bytes, terminated);
  if (!terminated) {
    return plugin_fault("is not NUL-terminated within " + std::to_string(max_bytes) + " bytes");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(view.data());
  for (std::size_t i = 0; i < view.size();) {
    char32_t c = 0;
    const std::size_t length = utf8_sequence(bytes + i, view.size() - i, c);
    if (length == 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(bytes[i]));
      return plugin_fault("is not UTF-8 (byte " + std::to_string(i) + " is " + hex + ")");
    }
    if (is_control(c)) {
      char code[12];
      std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(c));
      return plugin_fault("holds the control character " + std::string(code) + " at byte " +
                          std::to_string(i));
    }
    i += length;
  }
  return std::string(view);
}

// `text` made safe to print on one line whatever it holds: controls and
// bytes that are not UTF-8 escaped (\n, \xHH), cut after max_bytes with
// "...". For the plugin's error and log text, which the host shows rather
// than refuses.
std::string printable_text(const char* text, std::size_t max_bytes) {
  constexpr char kHex[] = "0123456789abcdef";
  bool terminated = false;
  const std::string_view view = bounded_text(text, max_bytes, terminated);
  const auto* bytes = reinterpret_cast<const unsigned char*>(view.data());
  std::string out;
  for (std::size_t i = 0; i < view.size();) {
    char32_t c = 0;
    const std::size_t length = utf8_sequence(bytes + i, view.size() - i, c);
    if (length == 0 || (length == 1 && is_control(c))) {
      if (c == '\n' && length == 1) {
        out += "\\n";
      } else if (c == '\r' && length == 1) {
        out += "\\r";
      } else if (c == '\t' && length == 1) {
        out += "\\t";
      } else {
        out += "\\x";
        out += kHex[bytes[i] >> 4];
        out += kHex[bytes[i] & 0xf];
      }
      ++i;
      continue;
    }
    if (is_control(c)) {
      char code[12];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
      out += code;
    } else {
      out.append(view.substr(i, length));
    }
    i += length;
  }
  if (!terminated) out += "...";
  return out;
}

}  // namespace fulcrum::host::detail
