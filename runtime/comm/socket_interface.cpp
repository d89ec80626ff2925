#include "comm/socket_interface.h"

#include <net/if.h>

#include <algorithm>
#include <string>
#include <vector>

namespace fulcrum::comm {
namespace {

std::string listing(const std::vector<std::string>& available) {
  if (available.empty()) return "this host lists no network interface";
  std::string text = "this host has ";
  for (std::size_t i = 0; i < available.size(); ++i) text += (i > 0 ? ", " : "") + available[i];
  return text;
}

}  // namespace

Result<std::optional<std::vector<std::string>>> parse_socket_ifname(
    const std::optional<std::string>& value, const std::vector<std::string>& available) {
  using Names = std::optional<std::vector<std::string>>;
  if (!value || value->empty()) return Names();
  const std::string quoted = std::string(kSocketIfnameVariable) + "='" + *value + "'";
  std::vector<std::string> names;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = value->find(',', begin);
    names.push_back(value->substr(begin, comma == std::string::npos ? comma : comma - begin));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  for (const std::string& name : names) {
    if (name.empty()) {
      return invalid_argument(quoted +
                              " has an empty interface name; give one interface, or a "
                              "comma-separated list without empty entries (e.g. eth0,eth1), or "
                              "unset it");
    }
    if (name.size() >= IF_NAMESIZE) {
      return invalid_argument(quoted + ": '" + name + "' is longer than an interface name (" +
                              std::to_string(IF_NAMESIZE - 1) + " characters at most); " +
                              listing(available) + ": set it to one of them, or unset it");
    }
    if (std::find(available.begin(), available.end(), name) == available.end()) {
      return invalid_argument(quoted + (names.size() > 1 ? ": '" + name + "' is" : " is") +
                              " not a network interface of this host; " + listing(available) +
                              ": set it to the interface that reaches the other hosts, or "
                              "unset it to let fulcrum choose");
    }
    if (std::count(names.begin(), names.end(), name) > 1) {
      return invalid_argument(quoted + " names '" + name + "' twice; list each interface once");
    }
  }
  return Names(std::move(names));
}

std::vector<std::string> host_interfaces() {
  std::vector<std::string> names;
  struct if_nameindex* list = ::if_nameindex();
  if (list == nullptr) return names;
  for (struct if_nameindex* i = list; i->if_index != 0 && i->if_name != nullptr; ++i) {
    names.emplace_back(i->if_name);
  }
  ::if_freenameindex(list);
  return names;
}

}  // namespace fulcrum::comm
