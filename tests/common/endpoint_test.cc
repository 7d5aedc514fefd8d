// Server addresses (common/endpoint.h): parsing, resolving a host name, and
// the endpoints a server binds and a worker connects to.
#include "common/endpoint.h"

#include <string>

#include <gtest/gtest.h>

#include "tests/util/status_matchers.h"

namespace ps {
namespace {

HostPort Parsed(const std::string& text) {
  HostPort endpoint;
  std::string problem;
  EXPECT_TRUE(ParseHostPort(text, &endpoint, &problem)) << problem;
  return endpoint;
}

TEST(EndpointTest, ParsesAddressesAndNamesIntoOneSpellingEach) {
  const HostPort v4 = Parsed("127.0.0.1:07000");
  EXPECT_EQ(v4.family, HostPort::Family::kIpv4);
  EXPECT_EQ(v4.port, 7000);
  EXPECT_EQ(v4.canonical, "127.0.0.1:7000");
  EXPECT_TRUE(v4.loopback);
  const HostPort v6 = Parsed("[0:0::1]:7001");
  EXPECT_EQ(v6.family, HostPort::Family::kIpv6);
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.canonical, "[::1]:7001");
  EXPECT_TRUE(v6.loopback);
  const HostPort name = Parsed("PS-Server-0.example:7002");
  EXPECT_EQ(name.family, HostPort::Family::kName);
  EXPECT_EQ(name.host, "ps-server-0.example");
  EXPECT_FALSE(name.loopback);
  EXPECT_TRUE(Parsed("LocalHost:1").loopback);

  HostPort endpoint;
  std::string problem;
  EXPECT_FALSE(ParseHostPort("::1:7000", &endpoint, &problem));
  EXPECT_NE(problem.find("IPv6 address without brackets"), std::string::npos) << problem;
  EXPECT_FALSE(ParseHostPort("host:70000", &endpoint, &problem));
  EXPECT_NE(problem.find("not in 1..65535"), std::string::npos) << problem;
}

TEST(EndpointTest, ResolvesNamesAndKeepsAddresses) {
  auto v4 = ResolveHost(Parsed("127.0.0.2:7000"));
  ASSERT_OK(v4);
  EXPECT_EQ(*v4, "127.0.0.2");
  auto v6 = ResolveHost(Parsed("[::1]:7000"));
  ASSERT_OK(v6);
  EXPECT_EQ(*v6, "[::1]");
  // Localhost names are loopback even where no /etc/hosts names them.
  for (const char* local : {"localhost:7000", "shard-0.localhost:7000"}) {
    auto address = ResolveHost(Parsed(local));
    ASSERT_OK(address);
    EXPECT_EQ(*address, "127.0.0.1") << local;
  }
}

TEST(EndpointTest, ANameThatDoesNotResolveIsAnErrorNamingIt) {
  // .invalid never resolves (RFC 2606).
  auto missing = ResolveHost(Parsed("no-such-host.invalid:7000"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("\"no-such-host.invalid\" does not resolve"),
            std::string::npos)
      << missing.status().message();
  EXPECT_FALSE(BindEndpoint(Parsed("no-such-host.invalid:7000"), false).ok());
}

TEST(EndpointTest, BindsTheResolvedAddressOrEveryInterfaceAndConnectsToTheName) {
  auto bind = BindEndpoint(Parsed("localhost:7000"), /*all_interfaces=*/false);
  ASSERT_OK(bind);
  EXPECT_EQ(*bind, "tcp://127.0.0.1:7000");
  auto all = BindEndpoint(Parsed("localhost:7000"), /*all_interfaces=*/true);
  ASSERT_OK(all);
  EXPECT_EQ(*all, "tcp://*:7000");
  EXPECT_EQ(ConnectEndpoint(Parsed("Server-0.Example:7000")), "tcp://server-0.example:7000");
  EXPECT_EQ(ConnectEndpoint(Parsed("LOCALHOST:7000")), "tcp://127.0.0.1:7000");
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(ServerListTest, JoinsAndParsesCommaSeparatedHostPorts) {
  EXPECT_EQ(JoinServerList({"a:1", "b:2"}), "a:1,b:2");
  auto parsed = ParseServerList("a:1,127.0.0.1:7000");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[1].canonical, "127.0.0.1:7000");
  for (const char* bad : {"", "a:1,", "a:1,,b:2", "a:1,b"}) {
    auto refused = ParseServerList(bad);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseServerList("a:1,b").status().message().find("entry 1"), std::string::npos);
}

}  // namespace
}  // namespace ps
