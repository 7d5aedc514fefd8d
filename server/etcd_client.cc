// etcd's gateway speaks protobuf's JSON mapping: bytes fields are base64,
// int64 fields come back as JSON strings ("revision": "12"), and fields
// at their zero value are left out (no "succeeded" means false, no "TTL"
// means 0). A streamed reply (lease keepalive) wraps its one message in
// {"result": ...}; an error is {"error": "...", "message": "...", "code": N}
// with N a gRPC code, or, on a stream, {"error": {"grpc_code": N, ...}}.
//
// The field readers below throw MalformedReply (as nlohmann's accessors
// throw json::exception) for a reply etcd would not send; Gateway::Call
// catches both, so no exception leaves this file.
#include "server/etcd_client.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

#include "common/endpoint.h"

namespace ps {
namespace {

using json = nlohmann::json;

constexpr std::string_view kBase64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  uint32_t bits = 0;  // only the low `count` bits are pending
  int count = 0;
  for (const char c : bytes) {
    bits = (bits << 8) | static_cast<unsigned char>(c);
    for (count += 8; count >= 6;) out += kBase64[(bits >> (count -= 6)) & 63];
  }
  if (count > 0) out += kBase64[(bits << (6 - count)) & 63];
  while (out.size() % 4 != 0) out += '=';
  return out;
}

// Standard base64 with padding, as etcd writes it; anything else is refused.
StatusOr<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return InvalidArgumentError("not base64 (length not a multiple of 4)");
  const size_t pad = text.ends_with("==") ? 2 : text.ends_with("=") ? 1 : 0;
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < text.size() - pad; ++i) {
    const size_t digit = kBase64.find(text[i]);
    if (digit == std::string_view::npos) {
      return InvalidArgumentError("not base64 (character " + std::to_string(i) + " of " +
                                  std::to_string(text.size()) + ")");
    }
    bits = (bits << 6) | static_cast<uint32_t>(digit);
    if ((count += 6) >= 8) out += static_cast<char>((bits >> (count -= 8)) & 0xff);
  }
  return out;
}

struct MalformedReply : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An int64 field: a JSON string of digits (or a number); 0 when absent.
int64_t Int64(const json& object, const char* field) {
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  const std::string& text = it->get_ref<const std::string&>();
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw MalformedReply(std::string(field) + " is \"" + text + "\", not an int64");
  }
  return value;
}

// A bytes field, base64 on the wire; empty when absent.
std::string Bytes(const json& object, const char* field) {
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) return "";
  StatusOr<std::string> bytes = Base64Decode(it->get_ref<const std::string&>());
  if (!bytes.ok()) throw MalformedReply(std::string(field) + ": " + bytes.status().message());
  return std::move(bytes).value();
}

// A member that must be an object or an array; absent: an empty one.
const json& Member(const json& object, const char* field, json::value_t type) {
  static const json kEmptyObject = json::object(), kEmptyArray = json::array();
  const auto it = object.find(field);
  if (it == object.end()) return type == json::value_t::object ? kEmptyObject : kEmptyArray;
  if (it->type() != type) throw MalformedReply(std::string(field) + " is " + it->type_name());
  return *it;
}

// The store revision of a reply's header; every reply of etcd has one.
int64_t Revision(const json& reply) {
  const int64_t revision = Int64(Member(reply, "header", json::value_t::object), "revision");
  if (revision < 1) throw MalformedReply("no header.revision");
  return revision;
}

EtcdKeyValue KeyValue(const json& kv) {
  return EtcdKeyValue{Bytes(kv, "key"),          Bytes(kv, "value"),   Int64(kv, "create_revision"),
                      Int64(kv, "mod_revision"), Int64(kv, "version"), Int64(kv, "lease")};
}

std::vector<EtcdKeyValue> KeyValues(const json& range_reply) {
  std::vector<EtcdKeyValue> kvs;
  for (const json& kv : Member(range_reply, "kvs", json::value_t::array)) {
    kvs.push_back(KeyValue(kv));
  }
  return kvs;
}

json PutRequest(const std::string& key, const std::string& value, int64_t lease) {
  return {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}, {"lease", lease}};
}

// A transaction: if `key`'s create_revision is `create_revision` (0: the key
// does not exist), `on_success`; otherwise read `key`.
json Txn(const std::string& key, int64_t create_revision, json on_success) {
  const json compare = {{"key", Base64Encode(key)},
                        {"target", "CREATE"},
                        {"result", "EQUAL"},
                        {"create_revision", create_revision}};
  const json read = {{"request_range", {{"key", Base64Encode(key)}}}};
  return {{"compare", json::array({compare})},
          {"success", json::array({std::move(on_success)})},
          {"failure", json::array({read})}};
}

// A txn whose failure branch reads the compared key: the result, with that
// key as `current` when the compare failed.
EtcdTxnResult TxnResult(const json& reply) {
  EtcdTxnResult result;
  result.revision = Revision(reply);
  result.succeeded = reply.value("succeeded", false);
  if (!result.succeeded) {
    for (const json& response : Member(reply, "responses", json::value_t::array)) {
      std::vector<EtcdKeyValue> kvs =
          KeyValues(Member(response, "response_range", json::value_t::object));
      if (!kvs.empty()) result.current = std::move(kvs.front());
    }
  }
  return result;
}

std::string Head(const std::string& text) {
  return text.size() <= 200 ? text : text.substr(0, 200) + "...";
}

// What a failed exchange with one endpoint means, for the Unavailable message.
std::string Describe(httplib::Error error) {
  using E = httplib::Error;
  return error == E::Connection          ? "cannot connect"
         : error == E::ConnectionTimeout ? "connect timed out"
         : error == E::Read              ? "no complete reply (timed out or closed)"
                                         : httplib::to_string(error);
}

// InvalidArgument unless `revision` can be a key's create_revision.
Status CheckCreateRevision(const char* call, const std::string& key, int64_t revision) {
  if (revision >= 1) return Status::Ok();
  return InvalidArgumentError(std::string("etcd ") + call + " of " + key + ": create_revision " +
                              std::to_string(revision) + "; expected >= 1");
}

// gRPC's codes are the canonical ones Status uses, plus 16 Unauthenticated.
StatusCode FromGrpcCode(int64_t code) {
  if (code == 16) return StatusCode::kPermissionDenied;
  if (code < 1 || code > 15) return StatusCode::kUnknown;
  return static_cast<StatusCode>(code);
}

}  // namespace

namespace etcd_internal {

class Gateway {
 public:
  struct Endpoint {
    std::string name;  // canonical "host:port"
    std::unique_ptr<httplib::Client> http;
  };

  using SteadyClock = std::chrono::steady_clock;

  Gateway(std::vector<Endpoint> endpoints, std::chrono::milliseconds timeout)
      : endpoints_(std::move(endpoints)), timeout_(timeout) {}

  void RetryUntil(SteadyClock::time_point deadline) { retry_until_ = deadline; }

  // POSTs `request` to `path` and returns what `decode` makes of the reply
  // (a stream's "result"); tries again while no endpoint answers, until
  // retry_until_, each try waiting twice as long.
  template <typename T, typename Decode>
  StatusOr<T> Call(const std::string& path, const json& request, Decode decode) {
    const std::string body = request.dump();
    std::chrono::milliseconds wait = timeout_;
    std::chrono::milliseconds pause(50);
    while (true) {
      SetTimeouts(wait);
      StatusOr<T> result = CallOnce<T>(path, body, decode);
      const auto now = SteadyClock::now();
      if (result.ok() || result.status().code() != StatusCode::kUnavailable ||
          now + pause + std::chrono::milliseconds(10) >= retry_until_) {
        SetTimeouts(timeout_);
        return result;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::seconds(1));
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          retry_until_ - SteadyClock::now());
      wait = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(10),
                                                 std::min(wait * 2, left));
    }
  }

 private:
  void SetTimeouts(std::chrono::milliseconds wait) {
    for (Endpoint& e : endpoints_) {
      e.http->set_connection_timeout(wait);
      e.http->set_read_timeout(wait);
      e.http->set_write_timeout(wait);
    }
  }

  // One try at every endpoint. The one place where transport failures, HTTP
  // and etcd errors and malformed replies become a Status.
  template <typename T, typename Decode>
  StatusOr<T> CallOnce(const std::string& path, const std::string& request, Decode decode) {
    std::string where = "etcd " + path;
    try {
      PS_ASSIGN_OR_RETURN(httplib::Response reply, Post(path, request, &where));
      const json body = json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
      if (body.is_object() && body.contains("error")) {
        const json& error = body["error"];
        const json& details = error.is_object() ? error : body;
        const std::string message =
            details.value("message", error.is_string() ? error.get<std::string>() : "");
        return Status(FromGrpcCode(details.value(error.is_object() ? "grpc_code" : "code", 2)),
                      where + ": " + message);
      }
      if (reply.status != 200) {
        return InternalError(where + ": HTTP " + std::to_string(reply.status) + ": " +
                             Head(reply.body));
      }
      if (!body.is_object()) {
        return DataLossError(where + ": the reply is not a JSON object: " + Head(reply.body));
      }
      return decode(body.contains("result") ? body["result"] : body);
    } catch (const json::exception& e) {
      return DataLossError(where + ": malformed reply: " + e.what());
    } catch (const MalformedReply& e) {
      return DataLossError(where + ": malformed reply: " + e.what());
    } catch (const std::exception& e) {  // httplib's own, should it throw
      return InternalError(where + ": " + e.what());
    }
  }

  // The first HTTP reply other than 503, trying each endpoint once, from the
  // one that answered last; *where gets the endpoint's name.
  StatusOr<httplib::Response> Post(const std::string& path, const std::string& body,
                                   std::string* where) {
    std::string failures;
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      const size_t e = (preferred_ + i) % endpoints_.size();
      Endpoint& endpoint = endpoints_[e];
      httplib::Request request;
      request.method = "POST";
      request.path = path;
      request.body = body;
      request.set_header("Content-Type", "application/json");
      httplib::Response reply;
      httplib::Error error = httplib::Error::Success;
      // etcd's error replies end in an HTTP trailer, which httplib 0.11
      // cannot read: it fails after the body, which reply.body then holds
      // (a truncated one is caught as malformed JSON).
      const bool answered =
          endpoint.http->send(request, reply, error) ||
          (error == httplib::Error::Read && reply.status > 0 && reply.has_header("Trailer"));
      if (answered && reply.status != 503) {
        preferred_ = e;
        *where = "etcd " + endpoint.name + " " + path;
        return reply;
      }
      failures += (failures.empty() ? "" : "; ") + endpoint.name + ": " +
                  (answered ? "HTTP 503 " + Head(reply.body) : Describe(error));
    }
    return UnavailableError(*where + ": no endpoint answered (" + failures +
                            "); is etcd running? replication.etcd.endpoints says where");
  }

  std::vector<Endpoint> endpoints_;
  const std::chrono::milliseconds timeout_;  // a first try's wait
  SteadyClock::time_point retry_until_;      // the epoch: no retries
  size_t preferred_ = 0;
};

}  // namespace etcd_internal

using etcd_internal::Gateway;

StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(std::vector<std::string> endpoints,
                                                         std::chrono::milliseconds timeout) {
  if (endpoints.empty()) return InvalidArgumentError("etcd endpoints: empty; expected host:port");
  if (timeout.count() <= 0) {
    return InvalidArgumentError("etcd timeout: " + std::to_string(timeout.count()) +
                                " ms; expected > 0");
  }
  std::vector<Gateway::Endpoint> parsed;
  for (const std::string& text : endpoints) {
    HostPort host_port;
    std::string problem;
    if (!ParseHostPort(text, &host_port, &problem)) {
      return InvalidArgumentError("etcd endpoint: " + problem);
    }
    auto http = std::make_unique<httplib::Client>(host_port.host, host_port.port);
    http->set_connection_timeout(timeout);
    http->set_read_timeout(timeout);
    http->set_write_timeout(timeout);
    http->set_keep_alive(true);
    // httplib would send an IPv6 host without its brackets.
    http->set_default_headers({{"Host", host_port.canonical}});
    parsed.push_back({host_port.canonical, std::move(http)});
  }
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(std::make_unique<Gateway>(std::move(parsed), timeout)));
}

void EtcdClient::RetryUntil(std::chrono::steady_clock::time_point deadline) {
  gateway_->RetryUntil(deadline);
}

EtcdClient::EtcdClient(std::unique_ptr<Gateway> gateway) : gateway_(std::move(gateway)) {}
EtcdClient::~EtcdClient() = default;

StatusOr<int64_t> EtcdClient::GrantLease(int64_t ttl_seconds) {
  if (ttl_seconds < 1) {
    return InvalidArgumentError("etcd lease TTL " + std::to_string(ttl_seconds) +
                                " s; expected >= 1");
  }
  return gateway_->Call<int64_t>("/v3/lease/grant", {{"TTL", ttl_seconds}}, [](const json& r) {
    const int64_t id = Int64(r, "ID");
    if (id == 0) throw MalformedReply("no lease ID");
    return id;
  });
}

StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  return gateway_->Call<int64_t>(
      "/v3/lease/keepalive", {{"ID", lease}}, [lease](const json& r) -> StatusOr<int64_t> {
        const int64_t ttl = Int64(r, "TTL");
        if (ttl > 0) return ttl;
        return NotFoundError("etcd lease " + std::to_string(lease) +
                             " has expired or was revoked; grant a new one");
      });
}

Status EtcdClient::RevokeLease(int64_t lease) {
  return gateway_->Call<int64_t>("/v3/lease/revoke", {{"ID", lease}}, Revision).status();
}

namespace {

// A range read: the keys in [key, range_end) (only `key` when range_end is
// empty), in key order.
StatusOr<std::vector<EtcdKeyValue>> Range(Gateway& gateway, const std::string& key,
                                          const std::string& range_end, int64_t* revision) {
  json request = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) request["range_end"] = Base64Encode(range_end);
  return gateway.Call<std::vector<EtcdKeyValue>>("/v3/kv/range", request, [&](const json& r) {
    const int64_t read_at = Revision(r);
    if (revision != nullptr) *revision = read_at;
    return KeyValues(r);
  });
}

}  // namespace

StatusOr<std::optional<EtcdKeyValue>> EtcdClient::Get(const std::string& key, int64_t* revision) {
  PS_ASSIGN_OR_RETURN(std::vector<EtcdKeyValue> kvs, Range(*gateway_, key, "", revision));
  if (kvs.empty()) return std::optional<EtcdKeyValue>();
  return std::optional<EtcdKeyValue>(std::move(kvs.front()));
}

StatusOr<std::vector<EtcdKeyValue>> EtcdClient::GetPrefix(const std::string& prefix,
                                                          int64_t* revision) {
  // The first key after every key that starts with `prefix`: its last byte
  // below 0xff raised by one. "\0" as range_end means "to the end", and as
  // the key, from the first key (etcd refuses an empty key).
  std::string end = prefix;
  while (!end.empty() && end.back() == '\xff') end.pop_back();
  if (!end.empty()) ++end.back();
  const std::string zero(1, '\0');
  return Range(*gateway_, prefix.empty() ? zero : prefix, end.empty() ? zero : end, revision);
}

StatusOr<int64_t> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  return gateway_->Call<int64_t>("/v3/kv/put", PutRequest(key, value, lease), Revision);
}

StatusOr<EtcdTxnResult> EtcdClient::PutIfAbsent(const std::string& key, const std::string& value,
                                                int64_t lease) {
  return gateway_->Call<EtcdTxnResult>(
      "/v3/kv/txn", Txn(key, 0, {{"request_put", PutRequest(key, value, lease)}}), TxnResult);
}

StatusOr<EtcdTxnResult> EtcdClient::PutIfHeld(const std::string& guard,
                                              int64_t guard_create_revision, const std::string& key,
                                              const std::string& value, int64_t lease) {
  PS_RETURN_IF_ERROR(CheckCreateRevision("PutIfHeld", guard, guard_create_revision));
  return gateway_->Call<EtcdTxnResult>(
      "/v3/kv/txn",
      Txn(guard, guard_create_revision, {{"request_put", PutRequest(key, value, lease)}}),
      TxnResult);
}

StatusOr<bool> EtcdClient::DeleteIfHeld(const std::string& key, int64_t create_revision) {
  PS_RETURN_IF_ERROR(CheckCreateRevision("DeleteIfHeld", key, create_revision));
  const json remove = {{"request_delete_range", {{"key", Base64Encode(key)}}}};
  return gateway_->Call<bool>("/v3/kv/txn", Txn(key, create_revision, remove), [](const json& r) {
    Revision(r);
    return r.value("succeeded", false);
  });
}

}  // namespace ps
