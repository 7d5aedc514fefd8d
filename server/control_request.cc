#include "server/control_request.h"

#include <optional>
#include <string>
#include <vector>

namespace ps {

Status AskServer(Socket& socket, const MessageHeader& request, std::chrono::milliseconds timeout,
                 std::chrono::milliseconds poll, const std::function<bool()>& stopped,
                 MessageHeader* answer) {
  Frame frame = EncodeHeader(request);
  PS_RETURN_IF_ERROR(socket.Send(std::span<Frame>(&frame, 1)));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<Frame> reply;
  std::vector<bool> readable;
  Socket* sockets[] = {&socket};
  while (std::chrono::steady_clock::now() < deadline) {
    if (stopped && stopped()) {
      return CancelledError("stopped before the answer to " + OpName(request.op));
    }
    PS_RETURN_IF_ERROR(PollReadable(sockets, static_cast<int>(poll.count()), &readable).status());
    while (true) {
      PS_ASSIGN_OR_RETURN(const bool got, socket.TryRecv(&reply));
      if (!got) break;
      if (reply.empty()) continue;
      Reply r;
      const Status checked = DecodeReply(
          reply, request.shard,
          [&request](uint64_t id) -> std::optional<ReplyExpectation> {
            if (id != request.request_id) return std::nullopt;  // an older request's
            return ReplyExpectation{.request = request.op, .shard = request.shard};
          },
          &r);
      if (r.fault == ReplyFault::kUnreadable || r.fault == ReplyFault::kUnmatched) continue;
      if (answer != nullptr) *answer = r.header;
      return checked;
    }
  }
  return DeadlineExceededError("no answer to " + OpName(request.op) + " within " +
                               std::to_string(timeout.count()) + " ms");
}

}  // namespace ps
