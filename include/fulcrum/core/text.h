// Small text helpers every layer shares. Part of fulcrum::core (no LibTorch).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fulcrum {

// The items with `separator` between each two: {"a", "b"}, ", " -> "a, b";
// no items -> "".
std::string join(const std::vector<std::string>& items, std::string_view separator);

}  // namespace fulcrum
