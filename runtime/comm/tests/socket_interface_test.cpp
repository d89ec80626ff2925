// GLOO_SOCKET_IFNAME's parsing and validation against a host's interfaces;
// the host's own list is only required to hold the loopback device.
#include "comm/socket_interface.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace fulcrum::comm {
namespace {

const std::vector<std::string> kHost = {"lo", "eth0", "ib0"};

std::string error_of(const std::string& value) {
  auto r = parse_socket_ifname(value, kHost);
  return r ? std::string("(accepted)") : r.status().message();
}

TEST(SocketIfname, UnsetOrEmptyMeansChoose) {
  EXPECT_FALSE(parse_socket_ifname(std::nullopt, kHost).value().has_value());
  // torch treats an empty GLOO_SOCKET_IFNAME as unset.
  EXPECT_FALSE(parse_socket_ifname(std::string(), kHost).value().has_value());
}

TEST(SocketIfname, OneOrSeveralInterfaces) {
  EXPECT_EQ(parse_socket_ifname(std::string("eth0"), kHost).value().value(),
            std::vector<std::string>{"eth0"});
  EXPECT_EQ(parse_socket_ifname(std::string("ib0,eth0"), kHost).value().value(),
            (std::vector<std::string>{"ib0", "eth0"}));
}

TEST(SocketIfname, AnUnknownInterfaceNamesTheVariableValueAndTheChoices) {
  EXPECT_EQ(error_of("bogus0"),
            "GLOO_SOCKET_IFNAME='bogus0' is not a network interface of this host; this host has "
            "lo, eth0, ib0: set it to the interface that reaches the other hosts, or unset it to "
            "let fulcrum choose");
  EXPECT_EQ(error_of("eth0,eth9").substr(0, 62),
            "GLOO_SOCKET_IFNAME='eth0,eth9': 'eth9' is not a network interf");
  // Names are exact: no trimming, no case folding.
  EXPECT_NE(error_of(" eth0").find("is not a network interface"), std::string::npos);
  EXPECT_NE(error_of("ETH0").find("is not a network interface"), std::string::npos);
  EXPECT_NE(parse_socket_ifname(std::string("eth0"), {})
                .status()
                .message()
                .find("this host lists no network interface"),
            std::string::npos);
}

TEST(SocketIfname, MalformedListsAreRefused) {
  for (const char* value : {",", "eth0,", ",eth0", "eth0,,ib0"}) {
    EXPECT_NE(error_of(value).find("has an empty interface name"), std::string::npos) << value;
  }
  EXPECT_NE(error_of("eth0,eth0").find("names 'eth0' twice"), std::string::npos);
  EXPECT_NE(error_of("averyveryverylongname0").find("longer than an interface name"),
            std::string::npos);
}

TEST(SocketIfname, ThisHostHasItsLoopbackDevice) {
  const std::vector<std::string> here = host_interfaces();
  ASSERT_NE(std::find(here.begin(), here.end(), "lo"), here.end());
  EXPECT_EQ(parse_socket_ifname(std::string("lo"), here).value().value(),
            std::vector<std::string>{"lo"});
  EXPECT_FALSE(parse_socket_ifname(std::string("fulcrum-no-such0"), here));
}

}  // namespace
}  // namespace fulcrum::comm
