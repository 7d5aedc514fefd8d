#include "common/endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <charconv>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "common/text.h"

namespace ps {
namespace {

bool IsHostnameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

char ToLower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

}  // namespace

bool ParseHostPort(std::string_view text, HostPort* endpoint, std::string* problem) {
  const std::string quoted = Quote(text);
  std::string_view host;
  std::string_view port;
  bool bracketed = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      *problem = quoted + " has '[' without a closing ']'";
      return false;
    }
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      *problem = quoted + " has no \":port\" after the bracketed address";
      return false;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    bracketed = true;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      *problem = quoted + " has no \":port\"";
      return false;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      *problem = quoted +
                 " looks like an IPv6 address without brackets (write "
                 "\"[::1]:7000\")";
      return false;
    }
  }
  if (host.empty()) {
    *problem = quoted + " has an empty host";
    return false;
  }

  // Port: decimal digits only, 1..65535.
  uint32_t port_number = 0;
  const bool port_digits =
      !port.empty() && port.size() <= 5 &&
      port.find_first_not_of("0123456789") == std::string_view::npos;
  if (port_digits) {
    std::from_chars(port.data(), port.data() + port.size(), port_number);
  }
  if (!port_digits || port_number < 1 || port_number > 65535) {
    *problem = quoted + " has port " + Quote(port) + ", not in 1..65535";
    return false;
  }

  const std::string host_string(host);
  std::string canonical_host;
  if (bracketed) {
    in6_addr address6{};
    if (inet_pton(AF_INET6, host_string.c_str(), &address6) != 1) {
      *problem = quoted + " has " + Quote(host) +
                 " in brackets, which is not an IPv6 address";
      return false;
    }
    char buffer[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &address6, buffer, sizeof(buffer));
    canonical_host = "[" + std::string(buffer) + "]";
    endpoint->host = buffer;
    endpoint->family = HostPort::Family::kIpv6;
    // ::1, or an IPv4-mapped address in 127.0.0.0/8 (::ffff:127.0.0.1).
    endpoint->loopback =
        IN6_IS_ADDR_LOOPBACK(&address6) ||
        (IN6_IS_ADDR_V4MAPPED(&address6) && address6.s6_addr[12] == 127);
  } else {
    in_addr address4{};
    if (inet_pton(AF_INET, host_string.c_str(), &address4) == 1) {
      char buffer[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &address4, buffer, sizeof(buffer));
      canonical_host = buffer;
      endpoint->host = buffer;
      endpoint->family = HostPort::Family::kIpv4;
      endpoint->loopback =
          reinterpret_cast<const unsigned char*>(&address4.s_addr)[0] == 127;
    } else {
      for (char c : host) {
        if (!IsHostnameChar(c)) {
          *problem = quoted + " has host " + Quote(host) +
                     ", which is neither an IP address nor a host name "
                     "(letters, digits, '-', '.', '_')";
          return false;
        }
        canonical_host.push_back(ToLower(c));
      }
      endpoint->host = canonical_host;
      endpoint->family = HostPort::Family::kName;
      endpoint->loopback = canonical_host == "localhost";
    }
  }
  endpoint->port = static_cast<uint16_t>(port_number);
  endpoint->canonical = canonical_host + ":" + std::to_string(port_number);
  return true;
}

namespace {

// "localhost" or a name under ".localhost": the loopback address whatever
// the resolver says (RFC 6761, 6.3); a container or a bare root may have no
// /etc/hosts that names it.
bool IsLocalhostName(const HostPort& endpoint) {
  if (endpoint.family != HostPort::Family::kName) return false;
  const std::string_view name = endpoint.host;
  constexpr std::string_view kLocal = ".localhost";
  return name == "localhost" ||
         (name.size() > kLocal.size() && name.substr(name.size() - kLocal.size()) == kLocal);
}

}  // namespace

StatusOr<std::string> ResolveHost(const HostPort& endpoint) {
  if (endpoint.family == HostPort::Family::kIpv4) return endpoint.host;
  if (endpoint.family == HostPort::Family::kIpv6) return "[" + endpoint.host + "]";
  if (IsLocalhostName(endpoint)) return std::string("127.0.0.1");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int err = ::getaddrinfo(endpoint.host.c_str(), nullptr, &hints, &found);
  if (err != 0 || found == nullptr) {
    return NotFoundError("host " + Quote(endpoint.host) + " does not resolve (" +
                         (err != 0 ? gai_strerror(err) : "no address") + ")");
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(found, ::freeaddrinfo);
  // The first address, IPv4 before IPv6 when the name has both (the order
  // getaddrinfo gives for "localhost" varies between systems).
  const addrinfo* pick = found;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  char buffer[INET6_ADDRSTRLEN];
  if (pick->ai_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr, buffer,
              sizeof(buffer));
    return std::string(buffer);
  }
  inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr, buffer,
            sizeof(buffer));
  return "[" + std::string(buffer) + "]";
}

StatusOr<HostPort> ServerAddress(const JobOptions& job, uint32_t shard) {
  const std::string entry = "cluster.servers[" + std::to_string(shard) + "]";
  HostPort host_port;
  std::string problem;
  if (!ParseHostPort(job.cluster.servers[shard], &host_port, &problem)) {
    return InvalidOption(job.source, entry, problem, "\"host:port\"");
  }
  if (StatusOr<std::string> resolved = ResolveHost(host_port); !resolved.ok()) {
    return InvalidOption(job.source, entry, resolved.status().message(),
                         "a host name this machine resolves, or an IP address");
  }
  return host_port;
}

StatusOr<HostPort> ReplicaHostPort(const JobOptions& job, uint32_t shard, uint32_t replica) {
  const auto servers = static_cast<uint32_t>(job.cluster.servers.size());
  const uint32_t host_of = (shard + replica) % servers;
  const std::string entry = "cluster.servers[" + std::to_string(host_of) + "]";
  HostPort host_port;
  std::string problem;
  if (!ParseHostPort(job.cluster.servers[host_of], &host_port, &problem)) {
    return InvalidOption(job.source, entry, problem, "\"host:port\"");
  }
  if (replica == 0) return host_port;
  const uint64_t port =
      host_port.port + uint64_t{replica} * uint64_t{job.replication.port_offset};
  if (port > 65535) {
    return OutOfRangeError("port " + std::to_string(host_port.port) + " of " + entry + " + " +
                           std::to_string(replica) + " x replication.port_offset " +
                           std::to_string(job.replication.port_offset) + " is " +
                           std::to_string(port) + ", above 65535");
  }
  host_port.port = static_cast<uint16_t>(port);
  const size_t colon = host_port.canonical.rfind(':');
  host_port.canonical = host_port.canonical.substr(0, colon + 1) + std::to_string(port);
  return host_port;
}

StatusOr<HostPort> ReplicaAddress(const JobOptions& job, uint32_t shard, uint32_t replica) {
  if (replica == 0) return ServerAddress(job, shard);
  PS_ASSIGN_OR_RETURN(HostPort host_port, ReplicaHostPort(job, shard, replica));
  if (StatusOr<std::string> resolved = ResolveHost(host_port); !resolved.ok()) {
    return InvalidOption(job.source,
                         "cluster.servers[" +
                             std::to_string((shard + replica) % job.cluster.servers.size()) + "]",
                         resolved.status().message(),
                         "a host name this machine resolves, or an IP address");
  }
  return host_port;
}

StatusOr<std::string> BindEndpoint(const HostPort& endpoint, bool all_interfaces) {
  if (all_interfaces) return "tcp://*:" + std::to_string(endpoint.port);
  PS_ASSIGN_OR_RETURN(std::string address, ResolveHost(endpoint));
  return "tcp://" + address + ":" + std::to_string(endpoint.port);
}

std::string ConnectEndpoint(const HostPort& endpoint) {
  if (IsLocalhostName(endpoint)) return "tcp://127.0.0.1:" + std::to_string(endpoint.port);
  return "tcp://" + endpoint.canonical;
}

std::string JoinServerList(const std::vector<std::string>& servers) {
  std::string text;
  for (const std::string& s : servers) {
    if (!text.empty()) text += ',';
    text += s;
  }
  return text;
}

StatusOr<std::vector<HostPort>> ParseServerList(std::string_view text) {
  std::vector<HostPort> servers;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view entry =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    HostPort server;
    std::string problem;
    if (!ParseHostPort(entry, &server, &problem)) {
      return InvalidArgumentError("server list '" + std::string(text) + "', entry " +
                                  std::to_string(servers.size()) + ": " + problem +
                                  "; expected host:port,host:port,...");
    }
    servers.push_back(std::move(server));
    if (comma == std::string_view::npos) return servers;
    start = comma + 1;
  }
}

}  // namespace ps
