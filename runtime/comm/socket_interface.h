// GLOO_SOCKET_IFNAME: the network interface(s) Gloo binds to, as torch reads
// it. A comma-separated list gives Gloo one device per interface (torch does
// the same; collectives are spread over them, and every rank must list the
// same number). No LibTorch, so the parsing is unit-tested on its own.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fulcrum/status.h"

namespace fulcrum::comm {

inline constexpr const char* kSocketIfnameVariable = "GLOO_SOCKET_IFNAME";

// The interfaces named by `value` (GLOO_SOCKET_IFNAME's text), each checked
// against `available` (this host's interface names). An unset or empty value
// means "not set" (nullopt inside the Result), as in torch. An error names the
// variable, its value, this host's interfaces and what to do, in one line.
Result<std::optional<std::vector<std::string>>> parse_socket_ifname(
    const std::optional<std::string>& value, const std::vector<std::string>& available);

// This host's network interfaces, in the kernel's order ("lo", "eth0", ...).
std::vector<std::string> host_interfaces();

}  // namespace fulcrum::comm
