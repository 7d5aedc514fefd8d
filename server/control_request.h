// A control request one process of the server side sends to a server and
// waits for: the etcd authority's MEMBERSHIP to its own server
// (server/etcd_authority.h), a next map's server asking an old shard to
// follow it (RESHARD kReshardFollow, server/reshard_follower.h). The
// server may not include the client library (docs/ARCHITECTURE.md,
// "Modules"), so this is the one request-and-answer loop they share.
//
// Thread-compatible: one call at a time per socket.
#ifndef PS_SERVER_CONTROL_REQUEST_H_
#define PS_SERVER_CONTROL_REQUEST_H_

#include <chrono>
#include <functional>

#include "common/status.h"
#include "common/transport.h"
#include "common/wire.h"

namespace ps {

// Sends `request` (its op, request_id, shard and fields set; worker
// kControlWorker) on `socket`, a DEALER connected to shard request.shard's
// server, and waits for its answer: OK when the server answered with the
// op's reply; the server's error (ERROR header) otherwise. Answers to
// other requests (an earlier one's, late) and unreadable ones are skipped.
// DeadlineExceeded after `timeout` ("no answer to OP within N ms");
// Cancelled as soon as `stopped` (when set; asked every `poll`) is true.
// `answer` (when set) gets the answer's header, an ERROR's too (its flags
// say, e.g., kFlagNotPrimary).
Status AskServer(Socket& socket, const MessageHeader& request, std::chrono::milliseconds timeout,
                 std::chrono::milliseconds poll, const std::function<bool()>& stopped,
                 MessageHeader* answer = nullptr);

}  // namespace ps

#endif  // PS_SERVER_CONTROL_REQUEST_H_
