#include "worker/training.h"

#include "client/client.h"
#include "common/logging.h"

namespace ps {

void LeaveJob(const ProgramContext& context) {
  if (context.client == nullptr) return;
  if (Status left = context.client->Leave(); !left.ok()) {
    PS_LOG_WARN("could not say goodbye to every shard: {}", left.ToString());
  }
}

}  // namespace ps
