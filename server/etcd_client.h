// A small etcd v3 client over etcd's HTTP/JSON gateway (the gRPC gateway
// every etcd >= 3.4 serves at its client URLs under /v3/): leases, single-key
// reads and writes, and the three compare-and-set transactions a leader
// election and a lease-guarded registration need. The adapter of cpp-httplib
// and nlohmann/json: etcd_client.cc is the only file that includes them, and
// every transport failure, HTTP error, etcd error body and malformed reply
// becomes a ps::Status there, in one function.
//
// Keys and values are arbitrary bytes (base64 on the wire). Revisions and
// lease ids are etcd's int64s.
//
// Deadlines: every call tries the endpoints in the order given, starting with
// the one that answered last; each try has the `timeout` of Create for its
// connect and again for each read and write. Until the time RetryUntil set,
// a call that no endpoint answered is tried again (all endpoints) after a
// pause of 50 ms doubling up to 1 s, each try waiting twice as long as the
// one before, but never past that time: a slow etcd (a loaded disk delays
// its fsyncs) is waited for, a dead one reported. A call that timed out on one
// endpoint after its request was sent may still have been applied there; the
// next endpoint then answers for the state after it (a PutIfAbsent may report
// !succeeded with the caller's own value and lease as `current`).
//
// Errors common to every call:
//  - Unavailable (retryable) when no endpoint answered: the message names
//    each endpoint tried with its failure. An endpoint that answers HTTP 503
//    (etcd without a leader) counts as not answering.
//  - The code etcd gives (gRPC codes map one to one; Unauthenticated becomes
//    PermissionDenied) with etcd's message, when etcd refuses the request.
//  - Internal for any other HTTP error status (the status and the body's
//    start in the message).
//  - DataLoss naming the endpoint and path when the reply is not the JSON
//    etcd sends (not JSON, a field of the wrong type, bad base64).
#ifndef PS_SERVER_ETCD_CLIENT_H_
#define PS_SERVER_ETCD_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ps {

// One key as etcd stores it. Revisions are 0 and `value` empty for a key that
// does not exist; `lease` is 0 for a key without a lease.
struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // the revision that created the key
  int64_t mod_revision = 0;     // the revision of its last write
  int64_t version = 0;          // writes since it was created (1 after the first)
  int64_t lease = 0;            // the lease it is attached to, or 0
};

// The outcome of a conditional write.
struct EtcdTxnResult {
  // The compare held and the write was done.
  bool succeeded = false;
  // The store's revision after the transaction (the response header's).
  int64_t revision = 0;
  // When !succeeded: the compared key as it is now; nullopt when it does not
  // exist. Always nullopt when succeeded.
  std::optional<EtcdKeyValue> current;
};

namespace etcd_internal {
class Gateway;  // etcd_client.cc: the HTTP connections and the JSON conversion
}  // namespace etcd_internal

// A client of one etcd cluster (see the file comment for deadlines and the
// errors every call may return). Not thread-safe: use one EtcdClient per
// thread (it keeps one HTTP connection per endpoint open between calls);
// several may talk to the same cluster at once.
class EtcdClient {
 public:
  // A client of the etcd cluster at `endpoints`, each "host:port": an IPv4
  // address, a host name, or an IPv6 address in brackets ("[::1]:2379").
  // Connects lazily: an etcd that is down is not an error here.
  // Errors: InvalidArgument naming the entry when `endpoints` is empty, an
  // entry is malformed or its port is not in 1..65535, or `timeout` is not
  // positive.
  static StatusOr<std::unique_ptr<EtcdClient>> Create(std::vector<std::string> endpoints,
                                                      std::chrono::milliseconds timeout);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // Calls that get no answer are tried again until `deadline` (see the top
  // of this file); a time in the past (the default): each call tries once.
  void RetryUntil(std::chrono::steady_clock::time_point deadline);

  // Grants a lease of `ttl_seconds`; returns its id. etcd may raise the TTL
  // to its minimum (about 1.5 election timeouts).
  // Errors: InvalidArgument for ttl_seconds < 1; the common ones.
  StatusOr<int64_t> GrantLease(int64_t ttl_seconds);

  // Renews `lease` once; returns the TTL it has now, in seconds.
  // Errors: NotFound when the lease has expired or was revoked (etcd answers
  // with TTL 0); the common ones.
  StatusOr<int64_t> KeepAlive(int64_t lease);

  // Revokes `lease`, deleting every key attached to it.
  // Errors: NotFound when the lease does not exist (any more); the common ones.
  Status RevokeLease(int64_t lease);

  // Reads `key`: nullopt when it does not exist. *revision, when not null,
  // gets the store's revision the read saw (also when the key is absent).
  StatusOr<std::optional<EtcdKeyValue>> Get(const std::string& key, int64_t* revision = nullptr);

  // Reads every key that starts with `prefix` (every key for ""), in
  // ascending byte order. *revision as for Get.
  StatusOr<std::vector<EtcdKeyValue>> GetPrefix(const std::string& prefix,
                                                int64_t* revision = nullptr);

  // Writes `key` = `value`, attached to `lease` (0: none). Returns the
  // store's revision after the write.
  // Errors: NotFound when `lease` does not exist; the common ones.
  StatusOr<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);

  // One transaction: if `key` does not exist, writes `key` = `value` with
  // `lease` (succeeded); otherwise reads it (current).
  // Errors: NotFound when `lease` does not exist; the common ones.
  StatusOr<EtcdTxnResult> PutIfAbsent(const std::string& key, const std::string& value,
                                      int64_t lease);

  // One transaction: if `guard` exists with create_revision
  // `guard_create_revision` (the caller still holds it), writes `key` =
  // `value` with `lease` (succeeded); otherwise reads `guard` (current).
  // Errors: InvalidArgument for guard_create_revision < 1 (0 would match a
  // guard that does not exist); NotFound when `lease` does not exist; the
  // common ones.
  StatusOr<EtcdTxnResult> PutIfHeld(const std::string& guard, int64_t guard_create_revision,
                                    const std::string& key, const std::string& value,
                                    int64_t lease);

  // One transaction: deletes `key` only if it exists with create_revision
  // `create_revision`. Returns true when it was deleted, false when the key
  // is gone or was created again since.
  // Errors: InvalidArgument for create_revision < 1; the common ones.
  StatusOr<bool> DeleteIfHeld(const std::string& key, int64_t create_revision);

 private:
  explicit EtcdClient(std::unique_ptr<etcd_internal::Gateway> gateway);

  const std::unique_ptr<etcd_internal::Gateway> gateway_;
};

}  // namespace ps

#endif  // PS_SERVER_ETCD_CLIENT_H_
