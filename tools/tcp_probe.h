// Whether a server listens at its TCP address, known in about a second
// (ps_ctl status): a ZeroMQ request to a server that is not running waits
// out its whole deadline, since ZeroMQ keeps reconnecting in silence, while
// a plain TCP connect is refused at once.
//
// Thread-safe: keeps no state.
#ifndef PS_TOOLS_TCP_PROBE_H_
#define PS_TOOLS_TCP_PROBE_H_

#include <chrono>
#include <string>

#include "common/endpoint.h"

namespace ps {

enum class ProbeResult {
  kListening,    // the connect succeeded (the connection is closed at once)
  kRefused,      // nothing listens there: the server is not running
  kUnreachable,  // no answer within the deadline, no route, or a name that does not resolve
};

struct TcpProbe {
  ProbeResult result = ProbeResult::kUnreachable;
  // Why, for a person: "connection refused", "no answer within 1000 ms",
  // "no route to host", the resolver's message; empty when listening.
  std::string reason;
};

// Connects to `address` (its host resolved as ResolveHost does) without
// blocking longer than `deadline`, then closes the connection. Sends
// nothing: the server sees a connection that ends before its handshake.
TcpProbe ProbeTcp(const HostPort& address, std::chrono::milliseconds deadline);

}  // namespace ps

#endif  // PS_TOOLS_TCP_PROBE_H_
