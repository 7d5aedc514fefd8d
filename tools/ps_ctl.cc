// ps_ctl: asks a running job's servers for their status, a checkpoint, or
// to shut down.
//   ps_ctl status     --config job.yaml [--shard N] [--timeout-ms 3000]
//   ps_ctl checkpoint --config job.yaml [--wait-s 600]
//   ps_ctl shutdown   --config job.yaml
// Exits 0 when every asked shard answered, 1 when one did not (named in the
// error), 2 on a bad config or flag.
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>

#include "client/control_client.h"
#include "common/config.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"ps_ctl: status, checkpoints and shutdown of a running parameter-server job"};
  app.require_subcommand(1);
  std::string config_path;
  std::optional<uint32_t> shard;
  uint32_t timeout_ms = 3000;
  CLI::App* status = app.add_subcommand("status", "print every shard's report (STATS)");
  CLI::App* shutdown = app.add_subcommand("shutdown", "ask every shard to shut down cleanly");
  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "ask every shard to write a checkpoint now and wait until all are written");
  uint32_t wait_s = 600;
  checkpoint->add_option("--wait-s", wait_s, "how long to wait for the writes, seconds");
  for (CLI::App* sub : {status, shutdown, checkpoint}) {
    sub->add_option("--config", config_path, "job YAML file")->required();
    sub->add_option("--timeout-ms", timeout_ms, "per-request deadline in milliseconds");
  }
  status->add_option("--shard", shard, "only this shard");
  CLI11_PARSE(app, argc, argv);

  if (!ps::InitLogging("ps_ctl", "warn").ok()) return 2;
  auto job = ps::LoadJobFile(config_path);
  if (!job.ok()) {
    std::fprintf(stderr, "ps_ctl: %s\n", job.status().ToString().c_str());
    return 2;
  }
  job->client.request_timeout_ms = timeout_ms;
  auto client = ps::ControlClient::Create(*job);
  if (!client.ok()) {
    std::fprintf(stderr, "ps_ctl: %s\n", client.status().ToString().c_str());
    return 1;
  }
  int rc = 0;
  if (status->parsed()) {
    for (uint32_t s = 0; s < (*client)->num_shards(); ++s) {
      if (shard && *shard != s) continue;
      auto report = (*client)->Stats(s);
      if (!report.ok()) {
        std::fprintf(stderr, "ps_ctl: %s\n", report.status().ToString().c_str());
        rc = 1;
        continue;
      }
      std::printf("%s", report->c_str());
    }
    if (shard && *shard >= (*client)->num_shards()) {
      std::fprintf(stderr, "ps_ctl: shard %u does not exist; the job has %u servers\n", *shard,
                   (*client)->num_shards());
      return 2;
    }
  } else if (checkpoint->parsed()) {
    auto generations = (*client)->CheckpointServers();
    if (!generations.ok()) {
      std::fprintf(stderr, "ps_ctl: %s\n", generations.status().ToString().c_str());
      return 1;
    }
    for (const std::string& g : *generations) std::printf("writing %s\n", g.c_str());
    // Done when no shard reports a write in progress.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
    for (uint32_t s = 0; s < (*client)->num_shards(); ++s) {
      while (true) {
        auto report = (*client)->Stats(s);
        if (!report.ok()) {
          std::fprintf(stderr, "ps_ctl: %s\n", report.status().ToString().c_str());
          return 1;
        }
        if (report->find(" writing 0\n") != std::string::npos) break;
        if (std::chrono::steady_clock::now() > deadline) {
          std::fprintf(stderr, "ps_ctl: shard %u is still writing its checkpoint after %u s\n",
                       s, wait_s);
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    std::printf("all %u checkpoints written\n", (*client)->num_shards());
  } else {
    ps::Status s = (*client)->ShutdownServers();
    if (!s.ok()) {
      std::fprintf(stderr, "ps_ctl: %s\n", s.ToString().c_str());
      rc = 1;
    } else {
      std::printf("all %u servers acknowledged SHUTDOWN\n", (*client)->num_shards());
    }
  }
  return rc;
}
