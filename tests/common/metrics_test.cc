// MetricsWriter and Histogram (the text format), and MetricsEndpoint
// serving it over HTTP on loopback.
#include "common/metrics.h"
#include "common/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace ps {
namespace {

TEST(MetricsWriterTest, WritesFamiliesWithConstantLabelsAndEscapedValues) {
  MetricsWriter out(MetricLabels{{"shard", "1"}});
  out.Counter("ps_pushes_total", "Pushes\nwith a \\ in help", 3);
  out.Family("ps_info", "gauge", "Info");
  out.Sample("ps_info", {{"path", "a\"b\\c\nd"}}, 1);
  EXPECT_EQ(out.text(),
            "# HELP ps_pushes_total Pushes\\nwith a \\\\ in help\n"
            "# TYPE ps_pushes_total counter\n"
            "ps_pushes_total{shard=\"1\"} 3\n"
            "# HELP ps_info Info\n"
            "# TYPE ps_info gauge\n"
            "ps_info{shard=\"1\",path=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(MetricsWriterTest, ValuesAreExactIntegersOrFloatsAndSpecialValuesAreSpelledOut) {
  MetricsWriter out;
  out.Sample("a", 123456789012.0);
  out.Sample("b", 0.25);
  out.Sample("c", 1.0 / 0.0);
  out.Sample("d", -1.0 / 0.0);
  out.Sample("e", 0.0 / 0.0);
  EXPECT_EQ(out.text(), "a 123456789012\nb 0.25\nc +Inf\nd -Inf\ne NaN\n");
}

TEST(HistogramTest, BucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.1);  // on a bound: counted in it (le)
  h.Observe(0.5);
  h.Observe(7);
  MetricsWriter out;
  h.Write(out, "t_seconds", {{"op", "push"}});
  EXPECT_EQ(out.text(),
            "t_seconds_bucket{op=\"push\",le=\"0.1\"} 2\n"
            "t_seconds_bucket{op=\"push\",le=\"1\"} 3\n"
            "t_seconds_bucket{op=\"push\",le=\"+Inf\"} 4\n"
            "t_seconds_sum{op=\"push\"} 7.65\n"
            "t_seconds_count{op=\"push\"} 4\n");
  EXPECT_EQ(h.count(), 4u);
}

// GET `path` from 127.0.0.1:`port` (HTTP/1.0, the connection closes after
// the reply): the whole reply, status line and headers included.
std::string Get(uint32_t port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return reply;
}

TEST(MetricsEndpointTest, ServesTheTextLastPublished) {
  auto endpoint = MetricsEndpoint::Start("127.0.0.1", 0, "shard 0");
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  const uint32_t port = (*endpoint)->port();
  EXPECT_GT(port, 0u);
  EXPECT_EQ((*endpoint)->address(), "127.0.0.1:" + std::to_string(port));
  std::string reply = Get(port, "/metrics");
  EXPECT_NE(reply.find("200 OK"), std::string::npos) << reply;
  EXPECT_NE(reply.find("text/plain; version=0.0.4"), std::string::npos) << reply;
  (*endpoint)->Publish("a 1\n");
  (*endpoint)->Publish("a 2\n");
  reply = Get(port, "/metrics");
  EXPECT_EQ(reply.substr(reply.size() - 4), "a 2\n") << reply;
  EXPECT_NE(Get(port, "/").find("shard 0: metrics at /metrics"), std::string::npos);
  EXPECT_NE(Get(port, "/nothing").find("404"), std::string::npos);
}

TEST(MetricsEndpointTest, APortInUseIsUnavailableNamingItAndTheOption) {
  auto first = MetricsEndpoint::Start("127.0.0.1", 0, "worker 0");
  ASSERT_TRUE(first.ok());
  const uint32_t port = (*first)->port();
  auto second = MetricsEndpoint::Start("127.0.0.1", port, "worker 1");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("worker 1"), std::string::npos);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(port)),
            std::string::npos);
  EXPECT_NE(second.status().message().find("metrics.port"), std::string::npos);
  // The first still serves.
  EXPECT_NE(Get(port, "/metrics").find("200 OK"), std::string::npos);
}

TEST(MetricsEndpointTest, AnAddressNotOfThisHostIsUnavailable) {
  auto endpoint = MetricsEndpoint::Start("192.0.2.1", 0, "shard 3");
  ASSERT_FALSE(endpoint.ok());
  EXPECT_EQ(endpoint.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(endpoint.status().message().find("metrics.bind"), std::string::npos);
}

TEST(MetricsEndpointTest, StartProcessMetricsFollowsTheFlagThenTheJob) {
  auto none = StartProcessMetrics("127.0.0.1", 0, -1, "shard 0");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  auto off_by_flag = StartProcessMetrics("127.0.0.1", 9100, 0, "shard 0");
  ASSERT_TRUE(off_by_flag.ok());
  EXPECT_EQ(*off_by_flag, nullptr);
  auto bad = StartProcessMetrics("127.0.0.1", 0, 70000, "shard 0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--metrics-port 70000"), std::string::npos);
}

}  // namespace
}  // namespace ps
