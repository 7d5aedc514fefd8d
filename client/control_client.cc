#include "client/control_client.h"

#include <utility>

namespace ps {

StatusOr<std::unique_ptr<ControlClient>> ControlClient::Create(const JobOptions& job,
                                                               std::vector<std::string> endpoints,
                                                               Env* env) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                      Client::Create(job, kControlWorker, std::move(endpoints), env));
  return std::unique_ptr<ControlClient>(new ControlClient(std::move(client)));
}

StatusOr<std::string> ControlClient::Stats(uint32_t shard) { return client_->Stats(shard); }

StatusOr<std::vector<std::string>> ControlClient::CheckpointServers() {
  return client_->CheckpointServers();
}

Status ControlClient::ShutdownServers() { return client_->ShutdownServers(); }

}  // namespace ps
