// EtcdClient (server/etcd_client.h) against a real etcd on loopback
// (tests/util/etcd_server.h), and against dead, silent and garbling
// endpoints (a raw socket listener in the test).
#include "server/etcd_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/util/etcd_server.h"
#include "tests/util/free_port.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Success when `status` has `code` and its message contains each of `parts`.
::testing::AssertionResult Refused(const Status& status, StatusCode code,
                                   std::initializer_list<std::string> parts) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << StatusCodeName(code) << ", got " << status.ToString();
  }
  for (const std::string& part : parts) {
    if (status.message().find(part) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message lacks \"" << part << "\": " << status.ToString();
    }
  }
  return ::testing::AssertionSuccess();
}

// A loopback listener on a thread of its own that answers every connection
// with `reply` (after reading the request, and `delay` later: a slow etcd)
// and closes it; with an empty `reply` it reads and never answers.
// Thread-compatible; joined on destruction.
class FixedReplyServer {
 public:
  explicit FixedReplyServer(std::string reply, milliseconds delay = milliseconds(0))
      : reply_(std::move(reply)), delay_(delay) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(listener_, 16), 0);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    endpoint_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    thread_ = std::thread([this] { Serve(); });
  }
  ~FixedReplyServer() {
    stop_ = true;
    thread_.join();
    close(listener_);
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void Serve() {
    std::vector<int> silent;  // kept open until the end: the client must time out
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (poll(&p, 1, 20) != 1) continue;
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::string request;
      char buffer[4096];
      // The request is small: its headers and body come in one or two reads.
      for (int reads = 0; reads < 2 && request.find("\r\n\r\n") == std::string::npos; ++reads) {
        pollfd q{fd, POLLIN, 0};
        if (poll(&q, 1, 1000) != 1) break;
        const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
        if (n <= 0) break;
        request.append(buffer, n);
      }
      if (reply_.empty()) {
        silent.push_back(fd);
        continue;
      }
      std::this_thread::sleep_for(delay_);
      // The client may have given up on this try already.
      send(fd, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      shutdown(fd, SHUT_WR);
      close(fd);
    }
    for (int fd : silent) close(fd);
  }

  const std::string reply_;
  const milliseconds delay_;
  int listener_ = -1;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string HttpReply(const std::string& status, const std::string& body) {
  return "HTTP/1.1 " + status +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    etcd_ = new StatusOr<std::unique_ptr<EtcdServer>>(EtcdServer::Start());
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }

  void SetUp() override {
    if (EtcdServer::NotInstalled(etcd_->status())) GTEST_SKIP() << etcd_->status().message();
    ASSERT_OK(*etcd_);
    client_ = Connect({EtcdEndpoint()});
    ASSERT_NE(client_, nullptr);
    // Each test's keys under a prefix of its own: the suite shares one etcd.
    prefix_ = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/";
  }

  static const std::string& EtcdEndpoint() { return etcd_->value()->endpoint(); }

  static std::unique_ptr<EtcdClient> Connect(std::vector<std::string> endpoints,
                                             milliseconds timeout = milliseconds(2000)) {
    StatusOr<std::unique_ptr<EtcdClient>> client =
        EtcdClient::Create(std::move(endpoints), timeout);
    EXPECT_OK(client);
    return client.ok() ? std::move(client).value() : nullptr;
  }

  static StatusOr<std::unique_ptr<EtcdServer>>* etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;
};

StatusOr<std::unique_ptr<EtcdServer>>* EtcdClientTest::etcd_ = nullptr;

TEST_F(EtcdClientTest, GrantedLeaseIsKeptAliveWithItsTtl) {
  StatusOr<int64_t> lease = client_->GrantLease(5);
  ASSERT_OK(lease);
  EXPECT_NE(*lease, 0);
  StatusOr<int64_t> ttl = client_->KeepAlive(*lease);
  ASSERT_OK(ttl);
  EXPECT_EQ(*ttl, 5);
  EXPECT_OK(client_->RevokeLease(*lease));
}

TEST_F(EtcdClientTest, KeyOfLapsedLeaseDisappearsAndKeepAliveThenSaysNotFound) {
  StatusOr<int64_t> lease = client_->GrantLease(1);
  ASSERT_OK(lease);
  const std::string key = prefix_ + "member";
  ASSERT_OK(client_->Put(key, "alive", *lease));
  ASSERT_OK(client_->Get(key));
  ASSERT_TRUE(client_->Get(key)->has_value());
  EXPECT_EQ((*client_->Get(key))->lease, *lease);

  const auto deadline = steady_clock::now() + std::chrono::seconds(5);
  StatusOr<std::optional<EtcdKeyValue>> read = client_->Get(key);
  while (read.ok() && read->has_value() && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));
    read = client_->Get(key);
  }
  ASSERT_OK(read);
  EXPECT_FALSE(read->has_value()) << "the key outlived its 1 s lease by 5 s";
  EXPECT_TRUE(Refused(client_->KeepAlive(*lease).status(), StatusCode::kNotFound,
                      {std::to_string(*lease), "expired"}));
}

TEST_F(EtcdClientTest, RevokedLeaseTakesItsKeysAndIsNotFoundAfterwards) {
  StatusOr<int64_t> lease = client_->GrantLease(30);
  ASSERT_OK(lease);
  ASSERT_OK(client_->Put(prefix_ + "k", "v", *lease));
  ASSERT_OK(client_->RevokeLease(*lease));
  StatusOr<std::optional<EtcdKeyValue>> read = client_->Get(prefix_ + "k");
  ASSERT_OK(read);
  EXPECT_FALSE(read->has_value());
  EXPECT_TRUE(Refused(client_->RevokeLease(*lease), StatusCode::kNotFound, {"lease not found"}));
  EXPECT_EQ(client_->KeepAlive(*lease).status().code(), StatusCode::kNotFound);
}

TEST_F(EtcdClientTest, PutWithUnknownLeaseIsRefusedWithEtcdsMessageAndTheClientGoesOn) {
  EXPECT_TRUE(Refused(client_->Put(prefix_ + "k", "v", 12345).status(), StatusCode::kNotFound,
                      {"requested lease not found", "/v3/kv/put", EtcdEndpoint()}));
  // etcd's error replies end in an HTTP trailer, which httplib 0.11 cannot
  // read: the next call must not trip over it.
  EXPECT_OK(client_->Put(prefix_ + "k", "v"));
  EXPECT_EQ((*client_->Get(prefix_ + "k"))->value, "v");
}

TEST_F(EtcdClientTest, PutIfAbsentSucceedsOnceAndShowsTheHolderToTheSecondCaller) {
  StatusOr<int64_t> lease = client_->GrantLease(30);
  ASSERT_OK(lease);
  const std::string key = prefix_ + "leader";
  StatusOr<EtcdTxnResult> first = client_->PutIfAbsent(key, "node-a", *lease);
  ASSERT_OK(first);
  EXPECT_TRUE(first->succeeded);
  EXPECT_FALSE(first->current.has_value());

  std::unique_ptr<EtcdClient> other = Connect({EtcdEndpoint()});
  StatusOr<EtcdTxnResult> second = other->PutIfAbsent(key, "node-b", 0);
  ASSERT_OK(second);
  EXPECT_FALSE(second->succeeded);
  EXPECT_EQ(second->revision, first->revision) << "a failed compare writes nothing";
  ASSERT_TRUE(second->current.has_value());
  EXPECT_EQ(second->current->key, key);
  EXPECT_EQ(second->current->value, "node-a");
  EXPECT_EQ(second->current->create_revision, first->revision);
  EXPECT_EQ(second->current->lease, *lease);
  EXPECT_OK(client_->RevokeLease(*lease));
}

// PutIfAbsent(key, value, no lease) that must succeed: the key's create_revision.
StatusOr<int64_t> CreateKey(EtcdClient& client, const std::string& key, const std::string& value) {
  PS_ASSIGN_OR_RETURN(EtcdTxnResult result, client.PutIfAbsent(key, value, 0));
  if (!result.succeeded) return Status(StatusCode::kAlreadyExists, key + " exists");
  return result.revision;
}

TEST_F(EtcdClientTest, PutIfHeldWritesOnlyWithTheGuardsCurrentCreateRevision) {
  const std::string guard = prefix_ + "leader";
  const std::string state = prefix_ + "state";
  StatusOr<int64_t> won = CreateKey(*client_, guard, "me");
  ASSERT_OK(won);
  StatusOr<EtcdTxnResult> put = client_->PutIfHeld(guard, *won, state, "s1", 0);
  ASSERT_OK(put);
  EXPECT_TRUE(put->succeeded);
  EXPECT_GT(put->revision, *won);
  EXPECT_EQ((*client_->Get(state))->value, "s1");

  // The guard deleted and created again by someone else: the old revision is stale.
  ASSERT_OK(client_->DeleteIfHeld(guard, *won));
  StatusOr<int64_t> retaken = CreateKey(*client_, guard, "other");
  ASSERT_OK(retaken);
  StatusOr<EtcdTxnResult> stale = client_->PutIfHeld(guard, *won, state, "s2", 0);
  ASSERT_OK(stale);
  EXPECT_FALSE(stale->succeeded);
  ASSERT_TRUE(stale->current.has_value());
  EXPECT_EQ(stale->current->value, "other");
  EXPECT_EQ(stale->current->create_revision, *retaken);
  EXPECT_EQ((*client_->Get(state))->value, "s1");

  // A guard that does not exist at all.
  StatusOr<EtcdTxnResult> absent = client_->PutIfHeld(prefix_ + "nobody", *won, state, "s3", 0);
  ASSERT_OK(absent);
  EXPECT_FALSE(absent->succeeded);
  EXPECT_FALSE(absent->current.has_value());
  EXPECT_TRUE(Refused(client_->PutIfHeld(guard, 0, state, "s4", 0).status(),
                      StatusCode::kInvalidArgument, {"create_revision 0"}));
}

TEST_F(EtcdClientTest, DeleteIfHeldDeletesOnlyTheSameIncarnationOfTheKey) {
  const std::string key = prefix_ + "lock";
  StatusOr<int64_t> first = client_->Put(key, "a");
  ASSERT_OK(first);
  StatusOr<bool> wrong = client_->DeleteIfHeld(key, *first + 100);
  ASSERT_OK(wrong);
  EXPECT_FALSE(*wrong);
  EXPECT_TRUE(client_->Get(key)->has_value());

  // A later write keeps the create_revision.
  ASSERT_OK(client_->Put(key, "b"));
  StatusOr<bool> deleted = client_->DeleteIfHeld(key, *first);
  ASSERT_OK(deleted);
  EXPECT_TRUE(*deleted);
  EXPECT_FALSE(client_->Get(key)->has_value());
  StatusOr<bool> again = client_->DeleteIfHeld(key, *first);
  ASSERT_OK(again);
  EXPECT_FALSE(*again);
}

TEST_F(EtcdClientTest, RevisionsIncreaseWithEachWriteAndReadsSeeTheLatest) {
  const std::string key = prefix_ + "k";
  StatusOr<int64_t> r1 = client_->Put(key, "1");
  StatusOr<int64_t> r2 = client_->Put(key, "2");
  ASSERT_OK(r1);
  ASSERT_OK(r2);
  EXPECT_GT(*r2, *r1);
  int64_t read_revision = 0;
  StatusOr<std::optional<EtcdKeyValue>> kv = client_->Get(key, &read_revision);
  ASSERT_OK(kv);
  ASSERT_TRUE(kv->has_value());
  EXPECT_GE(read_revision, *r2);
  EXPECT_EQ((*kv)->create_revision, *r1);
  EXPECT_EQ((*kv)->mod_revision, *r2);
  EXPECT_EQ((*kv)->version, 2);
  EXPECT_EQ((*kv)->lease, 0);

  int64_t absent_revision = 0;
  StatusOr<std::optional<EtcdKeyValue>> absent = client_->Get(prefix_ + "nope", &absent_revision);
  ASSERT_OK(absent);
  EXPECT_FALSE(absent->has_value());
  EXPECT_GE(absent_revision, *r2);
}

TEST_F(EtcdClientTest, GetPrefixReturnsOnlyThePrefixsKeysInOrder) {
  for (const char* k : {"b", "a", "c/x", "ab"}) ASSERT_OK(client_->Put(prefix_ + "p/" + k, k));
  ASSERT_OK(client_->Put(prefix_ + "p0", "outside"));  // '0' is the byte after '/'
  ASSERT_OK(client_->Put(prefix_ + "o", "outside"));
  int64_t revision = 0;
  StatusOr<std::vector<EtcdKeyValue>> kvs = client_->GetPrefix(prefix_ + "p/", &revision);
  ASSERT_OK(kvs);
  std::vector<std::string> keys;
  for (const EtcdKeyValue& kv : *kvs) keys.push_back(kv.key.substr(prefix_.size() + 2));
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "ab", "b", "c/x"}));
  EXPECT_GT(revision, 0);
  StatusOr<std::vector<EtcdKeyValue>> none = client_->GetPrefix(prefix_ + "q/");
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
}

TEST_F(EtcdClientTest, KeysAndValuesOfAnyBytesRoundTrip) {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  // Every length mod 3, so every base64 padding; keys ending in 0xff for the prefix's end.
  for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{256}}) {
    const std::string key = prefix_ + "\xff" + bytes.substr(256 - n);
    const std::string value = bytes.substr(0, n);
    ASSERT_OK(client_->Put(key, value));
    StatusOr<std::optional<EtcdKeyValue>> kv = client_->Get(key);
    ASSERT_OK(kv);
    ASSERT_TRUE(kv->has_value()) << n;
    EXPECT_EQ((*kv)->key, key);
    EXPECT_EQ((*kv)->value, value);
  }
  ASSERT_OK(client_->Put(prefix_ + "empty", ""));
  EXPECT_EQ((*client_->Get(prefix_ + "empty"))->value, "");
  StatusOr<std::vector<EtcdKeyValue>> all = client_->GetPrefix(prefix_ + "\xff");
  ASSERT_OK(all);
  EXPECT_EQ(all->size(), 4u);
}

TEST_F(EtcdClientTest, FallsOverToTheNextEndpointWhenTheFirstIsDead) {
  std::unique_ptr<EtcdClient> client =
      Connect({"127.0.0.1:" + std::to_string(FreePort()), EtcdEndpoint()});
  for (int i = 0; i < 3; ++i) {
    StatusOr<int64_t> revision = client->Put(prefix_ + "k", std::to_string(i));
    ASSERT_OK(revision) << "call " << i;
  }
  EXPECT_EQ((*client->Get(prefix_ + "k"))->value, "2");
}

TEST_F(EtcdClientTest, OnlyDeadEndpointsIsUnavailableNamingEachWithinTheTimeout) {
  const std::string a = "127.0.0.1:" + std::to_string(FreePort());
  const std::string b = "localhost:" + std::to_string(FreePort());
  std::unique_ptr<EtcdClient> client = Connect({a, b}, milliseconds(500));
  const auto start = steady_clock::now();
  const Status status = client->Put(prefix_ + "k", "v").status();
  EXPECT_LT(steady_clock::now() - start, milliseconds(1500));
  EXPECT_TRUE(Refused(status, StatusCode::kUnavailable,
                      {a, b, "/v3/kv/put", "is etcd running?", "replication.etcd.endpoints"}));
  EXPECT_TRUE(status.IsRetryable());
}

TEST_F(EtcdClientTest, SilentEndpointTimesOutAndTheNextOneAnswers) {
  FixedReplyServer silent("");
  std::unique_ptr<EtcdClient> client = Connect({silent.endpoint()}, milliseconds(300));
  const auto start = steady_clock::now();
  EXPECT_TRUE(
      Refused(client->Get(prefix_ + "k").status(), StatusCode::kUnavailable, {silent.endpoint()}));
  const auto took = steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(250));
  EXPECT_LT(took, milliseconds(1500));

  std::unique_ptr<EtcdClient> both =
      Connect({silent.endpoint(), EtcdEndpoint()}, milliseconds(300));
  ASSERT_OK(both->Put(prefix_ + "k", "v"));
}

TEST_F(EtcdClientTest, ASlowEtcdIsWaitedForWithinTheRetryTimeAndNotAfterIt) {
  // Every reply comes 400 ms after its request; a try waits 100 ms first.
  FixedReplyServer slow(HttpReply("200 OK", R"({"header":{"revision":"7"},"ID":"4660","TTL":"5"})"),
                        milliseconds(400));
  std::unique_ptr<EtcdClient> client = Connect({slow.endpoint()}, milliseconds(100));
  EXPECT_TRUE(Refused(client->GrantLease(5).status(), StatusCode::kUnavailable,
                      {slow.endpoint(), "/v3/lease/grant"}));
  // Tried again, each try waiting twice as long: answered.
  client->RetryUntil(steady_clock::now() + std::chrono::seconds(20));
  StatusOr<int64_t> lease = client->GrantLease(5);
  ASSERT_OK(lease);
  EXPECT_EQ(*lease, 4660);
  // Past the retry time, one try again.
  client->RetryUntil(steady_clock::now());
  EXPECT_TRUE(Refused(client->GrantLease(5).status(), StatusCode::kUnavailable,
                      {slow.endpoint()}));
}

TEST_F(EtcdClientTest, GarbledRepliesAreErrorsNamingThePathNotCrashes) {
  struct Case {
    std::string reply;
    StatusCode code;
    std::string part;
  };
  const std::vector<Case> cases = {
      {HttpReply("200 OK", "not json"), StatusCode::kDataLoss, "not a JSON object"},
      {HttpReply("200 OK", "[1, 2]"), StatusCode::kDataLoss, "not a JSON object"},
      {HttpReply("200 OK", "{}"), StatusCode::kDataLoss, "no header.revision"},
      {HttpReply("200 OK", R"({"header": {"revision": "12x"}})"), StatusCode::kDataLoss,
       "not an int64"},
      {HttpReply("200 OK", R"({"header": {"revision": 7}, "kvs": [{"key": "a!=="}]})"),
       StatusCode::kDataLoss, "key: not base64"},
      {HttpReply("200 OK", R"({"header": {"revision": 7}, "kvs": {"key": "YQ=="}})"),
       StatusCode::kDataLoss, "kvs is object"},
      {HttpReply("200 OK", R"({"header": {"revision": 7}, "kvs": [{"key": 5}]})"),
       StatusCode::kDataLoss, "malformed reply"},
      {HttpReply("500 Internal Server Error", "<html>oops</html>"), StatusCode::kInternal,
       "HTTP 500: <html>oops</html>"},
      {HttpReply("400 Bad Request", R"({"error": "bad", "message": "bad thing", "code": 3})"),
       StatusCode::kInvalidArgument, "bad thing"},
      {HttpReply("503 Service Unavailable", "no leader"), StatusCode::kUnavailable, "HTTP 503"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"hea", StatusCode::kUnavailable, ""},
      {"garbage\r\n\r\n", StatusCode::kUnavailable, ""},
  };
  for (const Case& c : cases) {
    FixedReplyServer server(c.reply);
    std::unique_ptr<EtcdClient> client = Connect({server.endpoint()}, milliseconds(1000));
    const Status status = client->Get("k").status();
    EXPECT_TRUE(Refused(status, c.code, {c.part, server.endpoint()})) << c.reply;
    if (c.code == StatusCode::kDataLoss) {
      EXPECT_TRUE(Refused(status, c.code, {"/v3/kv/range"})) << c.reply;
    }
  }
}

TEST_F(EtcdClientTest, CreateRefusesMalformedEndpointsAndTimeouts) {
  EXPECT_TRUE(Refused(EtcdClient::Create({}, milliseconds(100)).status(),
                      StatusCode::kInvalidArgument, {"empty"}));
  EXPECT_TRUE(Refused(EtcdClient::Create({"127.0.0.1"}, milliseconds(100)).status(),
                      StatusCode::kInvalidArgument, {"127.0.0.1"}));
  EXPECT_TRUE(Refused(EtcdClient::Create({"h:1", "h:70000"}, milliseconds(100)).status(),
                      StatusCode::kInvalidArgument, {"h:70000"}));
  EXPECT_TRUE(Refused(EtcdClient::Create({"h:1"}, milliseconds(0)).status(),
                      StatusCode::kInvalidArgument, {"timeout"}));
  EXPECT_OK(EtcdClient::Create({"[::1]:2379", "etcd-0.etcd:2379"}, milliseconds(100)));
  EXPECT_TRUE(Refused(client_->GrantLease(0).status(), StatusCode::kInvalidArgument, {"TTL"}));
}

}  // namespace
}  // namespace ps
