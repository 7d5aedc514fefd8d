// rejoin_bench: how long a replica that died takes to be a full replica of
// its shard again (replication.factor 2, server/replication.h), against
// raw ZeroMQ moving the same bytes over loopback in the same run.
//
// Workload: 2 shards (ShardServer on threads of this process, each with
// its own context, at free loopback ports) and their backups; one table of
// --floats values per shard (default 100M, 400 MB; dim 1, init uniform,
// optimizer --optimizer, default add: values only; adam adds two state
// arrays). A worker pushes one dense update so the copy is not the initial
// state.
//
// Each run (--runs, default 3): backup 1 of shard 0 is stopped and its
// object destroyed (as if it died); the primary is told to drop it
// (kMembershipDropBackup); t0; a new BackupServer is created with join
// (an empty store) and started, and the primary is told to add it
// (kMembershipAddBackup); the primary's STATS is polled every 2 ms until it
// reports the backup as acknowledged, not copying: t1. Then the copy must
// equal the primary's (ShardStore::Checksum of the table), or the bench
// exits 1.
//
// Raw, in the same run after each rejoin: a DEALER sends the same number
// of bytes in 1 MiB frames to a ROUTER on another context of this
// process (loopback TCP), timed until the receiver has them all.
//
// Reported: per run, rejoin seconds (t1 - t0: the new store's allocation,
// the copy's transfer and apply, the acknowledgement), raw seconds, and the
// ratio rejoin / raw; the medians.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/machine.h"
#include "client/client.h"
#include "client/control_client.h"
#include "common/logging.h"
#include "common/transport.h"
#include "server/replication.h"
#include "server/shard_server.h"

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Seconds raw ZeroMQ takes to move `bytes` from a DEALER to a ROUTER over
// loopback in 1 MiB frames.
StatusOr<double> RawSeconds(uint64_t bytes) {
  constexpr size_t kFrame = 1 << 20;
  PS_ASSIGN_OR_RETURN(auto rx_context, Context::Create(1));
  PS_ASSIGN_OR_RETURN(auto tx_context, Context::Create(1));
  SocketOptions so;
  so.send_hwm = 0;
  so.recv_hwm = 0;
  PS_ASSIGN_OR_RETURN(auto router, Socket::Create(rx_context.get(), SocketType::kRouter, so));
  PS_RETURN_IF_ERROR(router->Bind("tcp://127.0.0.1:*"));
  PS_ASSIGN_OR_RETURN(std::string endpoint, router->LastEndpoint());
  PS_ASSIGN_OR_RETURN(auto dealer, Socket::Create(tx_context.get(), SocketType::kDealer, so));
  PS_RETURN_IF_ERROR(dealer->Connect(endpoint));
  auto buffer = std::make_shared<std::vector<char>>(kFrame, 1);
  // One frame first: the connection is up before the clock starts.
  std::vector<Frame> frames;
  std::vector<bool> readable;
  Socket* sockets[] = {router.get()};
  auto receive = [&](uint64_t want) -> Status {
    uint64_t got = 0;
    const auto give_up = Clock::now() + std::chrono::seconds(120);
    while (got < want) {
      if (Clock::now() > give_up) return DeadlineExceededError("raw receiver: bytes missing");
      PS_RETURN_IF_ERROR(PollReadable(sockets, 100, &readable).status());
      while (true) {
        PS_ASSIGN_OR_RETURN(bool any, router->TryRecv(&frames));
        if (!any) break;
        for (size_t i = 1; i < frames.size(); ++i) got += frames[i].size();
      }
    }
    return Status::Ok();
  };
  auto send = [&](uint64_t n) -> Status {
    for (uint64_t sent = 0; sent < n; sent += kFrame) {
      PS_ASSIGN_OR_RETURN(Frame f, Frame::Share(buffer->data(), kFrame, buffer));
      PS_RETURN_IF_ERROR(dealer->Send(std::span<Frame>(&f, 1)));
    }
    return Status::Ok();
  };
  PS_RETURN_IF_ERROR(send(kFrame));
  PS_RETURN_IF_ERROR(receive(kFrame));
  const uint64_t n = (bytes + kFrame - 1) / kFrame * kFrame;
  const auto t0 = Clock::now();
  PS_RETURN_IF_ERROR(send(n));
  PS_RETURN_IF_ERROR(receive(n));
  return Seconds(Clock::now() - t0);
}

Status Main(uint64_t floats, const std::string& optimizer, int runs) {
  JobOptions job;
  job.cluster.workers = 1;
  PS_ASSIGN_OR_RETURN(job.replication.port_offset,
                      FreeReplicaPorts(2, 2, &job.cluster.servers));
  job.replication.factor = 2;
  job.server.exit_when_workers_leave = false;
  job.client.request_timeout_ms = 120000;
  TableOptions t;
  t.name = "emb";
  t.rows = 2 * floats;
  t.dim = 1;
  t.init.kind = InitKind::kUniform;
  t.init.value = 0.01f;
  t.optimizer.kind = optimizer == "adam" ? OptimizerKind::kAdam : OptimizerKind::kAdd;
  if (optimizer == "adam") t.optimizer.lr = 0.001f;
  job.tables.push_back(t);
  PS_RETURN_IF_ERROR(job.Validate());

  std::vector<std::unique_ptr<BackupServer>> backups(2);
  std::vector<std::thread> backup_threads(2);
  auto start_backup = [&](uint32_t s, bool join) -> Status {
    PS_ASSIGN_OR_RETURN(backups[s], BackupServer::Create(job, s, 1, "", -1, join));
    BackupServer* b = backups[s].get();
    backup_threads[s] = std::thread([b] { b->Run().IgnoreError(); });
    return Status::Ok();
  };
  for (uint32_t s = 0; s < 2; ++s) PS_RETURN_IF_ERROR(start_backup(s, false));
  std::vector<std::unique_ptr<ShardServer>> primaries;
  std::vector<std::thread> primary_threads;
  for (uint32_t s = 0; s < 2; ++s) {
    PS_ASSIGN_OR_RETURN(auto server, ShardServer::Create(job, s));
    primaries.push_back(std::move(server));
  }
  for (auto& p : primaries) primary_threads.emplace_back([&p] { p->Run().IgnoreError(); });
  PS_ASSIGN_OR_RETURN(auto client, Client::Create(job, 0));
  PS_RETURN_IF_ERROR(client->Join());
  PS_ASSIGN_OR_RETURN(Ticket push, client->PushDense(0, SharedFloats::Take(std::vector<float>(
                                                            t.rows, 0.5f))));
  PS_RETURN_IF_ERROR(client->Wait(push));
  PS_ASSIGN_OR_RETURN(auto control, ControlClient::Create(job, std::vector<std::string>{}));

  const double mb = static_cast<double>(floats) * sizeof(float) *
                    (optimizer == "adam" ? 3 : 1) / 1e6;
  std::printf("rejoin_bench: %llu floats per shard (%s: %.0f MB of state to copy), %d runs; %s, "
              "%u hardware threads\n\n",
              static_cast<unsigned long long>(floats), optimizer.c_str(), mb, runs,
              CpuModel().c_str(), std::thread::hardware_concurrency());
  std::printf("| run | rejoin s | raw ZeroMQ s | rejoin / raw | rejoin MB/s |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  std::vector<double> rejoin, raw, ratio;
  int64_t epoch = 0;
  for (int run = 1; run <= runs; ++run) {
    backups[0]->Stop();
    backup_threads[0].join();
    backups[0].reset();
    PS_RETURN_IF_ERROR(control->Membership(0, kMembershipDropBackup, 1, ++epoch));
    const auto t0 = Clock::now();
    PS_RETURN_IF_ERROR(start_backup(0, /*join=*/true));
    PS_RETURN_IF_ERROR(control->Membership(0, kMembershipAddBackup, 1, ++epoch));
    const auto give_up = t0 + std::chrono::seconds(300);
    while (true) {
      PS_ASSIGN_OR_RETURN(ShardStats stats, control->StructuredStats(0));
      if (stats.replication &&
          std::any_of(stats.replication->backups.begin(), stats.replication->backups.end(),
                      [](const ShardStats::Replication::Backup& b) {
                        return b.replica == 1 && b.state == "acked";
                      })) {
        break;
      }
      if (Clock::now() > give_up) {
        return DeadlineExceededError("the backup did not rejoin: " + ShardStatsText(stats));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const double seconds = Seconds(Clock::now() - t0);
    PS_ASSIGN_OR_RETURN(double raw_seconds,
                        RawSeconds(static_cast<uint64_t>(mb * 1e6)));
    rejoin.push_back(seconds);
    raw.push_back(raw_seconds);
    ratio.push_back(seconds / raw_seconds);
    std::printf("| %d | %.3f | %.3f | %.2f | %.0f |\n", run, seconds, raw_seconds,
                seconds / raw_seconds, mb / seconds);
    std::fflush(stdout);
  }
  std::printf("| median | %.3f | %.3f | %.2f | %.0f |\n\n", Median(rejoin), Median(raw),
              Median(ratio), mb / Median(rejoin));
  // Everything stops; the rejoined backup ends with the primary's last entry.
  client->Leave().IgnoreError();
  for (auto& p : primaries) p->Stop();
  for (auto& th : primary_threads) th.join();
  for (auto& th : backup_threads) {
    if (th.joinable()) th.join();
  }
  for (uint32_t s = 0; s < 2; ++s) {
    if (backups[s]->store().Checksum(0) != primaries[s]->store().Checksum(0) ||
        backups[s]->refused() != 0) {
      return DataLossError("backup 1 of shard " + std::to_string(s) +
                           " does not hold its primary's copy after the rejoins");
    }
  }
  std::printf("Every backup holds its primary's table bit for bit.\n");
  return Status::Ok();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  CLI::App app{"rejoin_bench: a replica rejoining its shard against raw ZeroMQ"};
  uint64_t floats = 100'000'000;
  std::string optimizer = "add";
  int runs = 3;
  bool quick = false;
  app.add_option("--floats", floats, "values per shard (default 100M)")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", optimizer, "add (values only) or adam (values and two states)")
      ->check(CLI::IsMember({"add", "adam"}));
  app.add_option("--runs", runs, "rejoins measured (default 3)")->check(CLI::PositiveNumber);
  app.add_flag("--quick", quick, "1 run of 1M floats: a smoke test (numbers mean nothing)");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    floats = 1'000'000;
    runs = 1;
  }
  ps::InitLogging("rejoin_bench", "warn").IgnoreError();
  ps::Status s = ps::Main(floats, optimizer, runs);
  if (!s.ok()) {
    std::fprintf(stderr, "rejoin_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
