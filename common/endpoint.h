// A server's address as the job names it ("host:port" in cluster.servers):
// parsing it, resolving its host, and the ZeroMQ endpoints to bind and to
// connect to.
//
// A host is an IPv4 address, an IPv6 address in brackets ("[::1]:7000")
// or a name (DNS, /etc/hosts: "localhost", "ps-server-0.ps"). A server
// binds the address its name resolves to (ZeroMQ would read a name as a
// network interface), or every interface when the job says so; workers
// connect to the name, which ZeroMQ resolves again on each reconnect.
//
// Thread-safe: the functions keep no state.
#ifndef PS_COMMON_ENDPOINT_H_
#define PS_COMMON_ENDPOINT_H_

#include <cstdint>
#include <string>
#include <vector>
#include <string_view>

#include "common/options.h"
#include "common/status.h"

namespace ps {

struct HostPort {
  enum class Family { kIpv4, kIpv6, kName };
  // The host as written, normalised: an IPv4 or IPv6 address in its usual
  // form (no brackets), or a name in lower case.
  std::string host;
  Family family = Family::kName;
  uint16_t port = 0;
  // The same socket whatever the spelling ("LOCALHOST:07000" and
  // "localhost:7000" are one endpoint): "<host>:<port>", an IPv6 host in
  // brackets.
  std::string canonical;
  // 127.0.0.0/8, ::1 (or IPv4-mapped 127.x), or "localhost".
  bool loopback = false;
};

// Parses "host:port" into *endpoint; on failure returns false and sets
// *problem to what is wrong with `text` (quoting it). Resolves nothing.
bool ParseHostPort(std::string_view text, HostPort* endpoint, std::string* problem);

// The address to use for `endpoint`'s host: an address as it is ("[...]"
// for IPv6); "localhost" and names under ".localhost" 127.0.0.1 (RFC 6761);
// another name resolved now (its first IPv4 address, else its first IPv6
// one). NotFound "host \"x\" does not resolve (<resolver's reason>)".
StatusOr<std::string> ResolveHost(const HostPort& endpoint);

// Shard `shard`'s entry of job.cluster.servers, parsed, once its host was
// seen to resolve now. InvalidArgument "<source>: cluster.servers[<shard>]:
// ..." naming the entry (a name that does not resolve, or an entry
// Validate() would refuse). REQUIRES: shard < job.cluster.servers.size().
StatusOr<HostPort> ServerAddress(const JobOptions& job, uint32_t shard);

// Where replica `replica` of shard `shard`'s rows listens
// (replication.factor, common/options.h): replica 0 is the shard's own
// entry of cluster.servers; backup j >= 1 has the host of entry
// (shard + j) mod S, the next servers on the ring, and that entry's port +
// j x replication.port_offset. Parses, resolves nothing. InvalidArgument
// for an entry that does not parse; OutOfRange for a port above 65535.
// REQUIRES: shard < S.
StatusOr<HostPort> ReplicaHostPort(const JobOptions& job, uint32_t shard, uint32_t replica);
// ReplicaHostPort, once its host was seen to resolve (as ServerAddress).
StatusOr<HostPort> ReplicaAddress(const JobOptions& job, uint32_t shard, uint32_t replica);

// The ZeroMQ endpoint a server binds: "tcp://*:<port>" with
// `all_interfaces`, else "tcp://<ResolveHost>:<port>". Errors: ResolveHost's.
StatusOr<std::string> BindEndpoint(const HostPort& endpoint, bool all_interfaces);

// The ZeroMQ endpoint a worker connects to: "tcp://<canonical>" (the name,
// which ZeroMQ resolves on each reconnect); "tcp://127.0.0.1:<port>" for a
// localhost name.
std::string ConnectEndpoint(const HostPort& endpoint);

// A shard map's servers as RESHARD and moved replies carry them
// (server/reshard_gate.h): "host:port,host:port".
std::string JoinServerList(const std::vector<std::string>& servers);
// Such a list parsed, entry by entry (resolves nothing). InvalidArgument
// quoting the list and saying what is wrong with an entry (an empty list
// or entry, or one ParseHostPort refuses).
StatusOr<std::vector<HostPort>> ParseServerList(std::string_view text);

}  // namespace ps

#endif  // PS_COMMON_ENDPOINT_H_
