// Servers named by host in cluster.servers (common/endpoint.h): a shard
// binds what its name resolves to and a client reaches it by the name; a
// name that does not resolve and a port in use are errors naming the file
// and the entry. Loopback only.
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "client/client.h"
#include "client/control_client.h"
#include "common/options.h"
#include "server/shard_server.h"
#include "tests/util/free_port.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

JobOptions OneShardAt(const std::string& address) {
  JobOptions job = TestJob().Servers(1).Workers(1).Table("w", 16).Build();
  job.cluster.servers = {address};
  job.source = "job.yaml";
  return job;
}

TEST(ServerAddressTest, AShardNamedByHostBindsItAndAClientReachesItByName) {
  const int port = FreePort();
  const JobOptions job = OneShardAt("localhost:" + std::to_string(port));
  ASSERT_OK(job.Validate());
  auto server = ShardServer::Create(job, 0);
  ASSERT_OK(server);
  const std::string bound = (*server)->endpoint();
  EXPECT_EQ(bound, "tcp://127.0.0.1:" + std::to_string(port));
  Status ran;
  std::thread serving([&] { ran = (*server)->Run(); });
  {
    auto control = ControlClient::Create(job);
    ASSERT_OK(control);
    EXPECT_EQ((*control)->endpoint(0), "tcp://127.0.0.1:" + std::to_string(port));
    auto stats = (*control)->Stats(0);
    EXPECT_OK(stats);
    EXPECT_OK((*control)->ShutdownServers());
  }
  serving.join();
  EXPECT_OK(ran);
}

TEST(ServerAddressTest, APortInUseNamesTheFileAndTheEntry) {
  const JobOptions job = OneShardAt("127.0.0.1:" + std::to_string(FreePort()));
  auto first = ShardServer::Create(job, 0);
  ASSERT_OK(first);
  auto second = ShardServer::Create(job, 0);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  for (const std::string& part :
       {"job.yaml: cluster.servers[0]: \"" + job.cluster.servers[0] + "\"",
        std::string("cannot listen there"), std::string("in use"),
        std::string("change this entry")}) {
    EXPECT_NE(second.status().message().find(part), std::string::npos)
        << part << " in " << second.status().message();
  }
}

TEST(ServerAddressTest, ANameThatDoesNotResolveIsRefusedByServerAndClientNamingIt) {
  // .invalid never resolves (RFC 2606); nothing is sent anywhere.
  JobOptions job = OneShardAt("no-such-host.invalid:7000");
  job.cluster.allow_remote = true;
  ASSERT_OK(job.Validate());
  auto server = ShardServer::Create(job, 0);
  EXPECT_TRUE(InvalidWith(server.status(), {"job.yaml: cluster.servers[0]",
                                            "\"no-such-host.invalid\" does not resolve"}));
  auto client = Client::Create(job, 0);
  EXPECT_TRUE(InvalidWith(client.status(), {"job.yaml: cluster.servers[0]",
                                            "\"no-such-host.invalid\" does not resolve"}));
}

TEST(ServerAddressTest, BindingEveryInterfaceNeedsAllowRemote) {
  JobOptions job = OneShardAt("127.0.0.1:7000");
  job.cluster.bind = BindMode::kAll;
  EXPECT_TRUE(InvalidWith(job.Validate(), {"cluster.bind", "cluster.allow_remote: true"}));
  job.cluster.allow_remote = true;
  EXPECT_OK(job.Validate());
}

}  // namespace
}  // namespace ps
