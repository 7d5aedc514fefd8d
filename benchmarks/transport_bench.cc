// transport_bench: the parameter server's push/pull path against raw ZeroMQ
// moving the same bytes over the same sockets, in the same run.
//
// Layout (both sides): one server on a thread of this process with its own
// ZeroMQ context (1 I/O thread) and a ROUTER bound to tcp://127.0.0.1:<free
// port>; one client on the main thread with its own context (1 I/O thread)
// and one DEALER connected to it. Loopback TCP.
//
// Workloads, for each request size N (value bytes: 4 KiB, 64 KiB, 1 MiB,
// 16 MiB by default), each depth D (1 and 8 requests in flight):
//   ours push       Client::PushDense of a dense table of N/4 rows, dim 1,
//                   optimizer `add`, values shared zero-copy (SharedFloats);
//                   done when the server's PUSH_OK arrives.
//   ours pull       Client::PullDense of that table into a PulledValues
//                   (the received frames, no copy; one per in-flight slot),
//                   or with --pull-into buffer into a caller buffer (one
//                   more pass over the values on the client).
//   ours push+pull  a push, then (when acknowledged) a pull of the same table;
//                   one operation moves 2N bytes.
//   raw push        the DEALER sends one frame of N bytes (Frame::Share of a
//                   preallocated buffer, zero-copy); the ROUTER thread answers
//                   with an 8-byte ack frame.
//   raw pull        the DEALER sends an 8-byte request (the size wanted); the
//                   ROUTER answers with N bytes shared zero-copy from a
//                   preallocated buffer.
//   raw push+pull   a raw push, then a raw pull.
// The raw server loop is the same poll-then-drain loop as ShardServer::Run
// (PollReadable with a 100 ms timeout, then TryRecv until empty) with no
// decode, check, apply or copy. With D in flight the client issues D
// operations and starts another each time one completes (callbacks for ours,
// counted replies for raw).
//
// Each measurement warms up, then runs for --time seconds (and at least a few
// operations), and is repeated --reps times with ours and raw interleaved
// (ours, raw, raw, ours, ours, raw, ...: each side goes first in half the
// repetitions) so machine noise, and whatever one side leaves behind for
// the next, hits both alike. Reported:
// the median over repetitions of throughput (MB/s, 1 MB = 10^6 bytes, bytes
// of values moved: N per push or pull, 2N per push+pull), and p50/p99 of the
// per-operation latencies (issue to completion, microseconds) pooled over all
// repetitions. Ratio = ours/raw; for latency lower is better.
//
// One-way message rate: the DEALER sends fixed-size 4 KiB frames as fast as
// its send queue (HWM 1000) accepts them and the ROUTER thread only receives;
// the rate is counted on the receiver over --oneway-messages messages. It is
// set against ours 4 KiB push with 8 in flight (acknowledged pushes/s) and,
// for scale, raw request/ack with 8 in flight, all three interleaved.
//
// --curve: both sides under CurveZMQ. Ours runs with security.mode curve
// (keys written to a temporary folder, a worker key on the client); raw
// uses the same kind of keys on its ROUTER and DEALER with a ZAP handler
// letting the client's key in, so the ratio is ours against raw CURVE.
//
// --busy-cores N: N processes spin, unpinned, while both sides measure (a
// worker host's data loading and compute, or `yes > /dev/null`), killed at
// the end. The targets then ask 1 MiB pulls for 0.8x raw; pushes have none
// (the shard applies each push, a pass over the values raw does not make).
//
// Any failed request, unexpected reply or lost push makes the program print
// the error and exit 1: no numbers are reported from a failed run. At the end
// every table is pulled back and checked against the number of acknowledged
// pushes (each push adds 1.0 to every value).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchmarks/machine.h"
#include "benchmarks/transport_common.h"
#include "benchmarks/transport_raw.h"
#include "benchmarks/transport_report.h"
#include "client/client.h"
#include "common/logging.h"
#include "common/metrics_endpoint.h"
#include "common/options.h"
#include "common/security.h"
#include "common/status.h"
#include "common/transport.h"
#include "server/replication.h"
#include "server/shard_server.h"

namespace ps::transport_bench {
namespace {


// "4K", "64k", "1M", "16M" or a plain byte count.
StatusOr<uint64_t> ParseSize(const std::string& text) {
  if (text.empty()) return InvalidArgumentError("--sizes: empty size");
  uint64_t mult = 1;
  std::string digits = text;
  const char last = text.back();
  if (last == 'K' || last == 'k') mult = 1u << 10;
  if (last == 'M' || last == 'm') mult = 1u << 20;
  if (mult != 1) digits.pop_back();
  if (digits.empty() || digits.size() > 12 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgumentError("--sizes: '" + text + "' is not a size; use e.g. 4K, 64K, 1M, 16M");
  }
  const uint64_t bytes = std::stoull(digits) * mult;
  if (bytes < 16 || bytes % 4 != 0 || bytes > (64u << 20)) {
    return InvalidArgumentError("--sizes: '" + text +
                                "' must be a multiple of 4 bytes between 16 B and 64 MiB");
  }
  return bytes;
}

// ---------------------------------------------------------------------------
// Ours: a ShardServer on a thread and a Client.

class Ours {
 public:
  // `keys_dir`: non-empty for security.mode curve with the keys there.
  // `shards` ShardServers (each table's rows split over them), each with
  // `factor` - 1 backups (replication.factor; BackupServers on threads).
  // `metrics`: each shard serves its metrics (metrics.port; an endpoint on
  // a free port) and so counts and times every request as a job with
  // metrics does.
  static StatusOr<std::unique_ptr<Ours>> Create(const std::vector<uint64_t>& sizes,
                                                const std::string& keys_dir,
                                                uint32_t shards = 1, uint32_t factor = 1,
                                                bool metrics = false) {
    std::unique_ptr<Ours> o(new Ours());
    JobOptions& job = o->job_;
    if (!keys_dir.empty()) {
      job.security.mode = SecurityMode::kCurve;
      job.security.keys_dir = keys_dir;
    }
    job.cluster.workers = 1;
    job.replication.factor = factor;
    if (shards == 1 && factor == 1) {
      job.cluster.servers = {"127.0.0.1:1"};  // not used: the shard binds a free port
    } else {
      // The primaries find their backups by the job's addresses: real
      // ports, and an offset whose backup ports are free too.
      PS_ASSIGN_OR_RETURN(job.replication.port_offset, FreeReplicaPorts(shards, factor,
                                                                        &job.cluster.servers));
    }
    for (uint64_t bytes : sizes) {
      TableOptions t;
      t.name = "v" + std::to_string(bytes);
      t.rows = bytes / sizeof(float);
      t.dim = 1;
      t.optimizer.kind = OptimizerKind::kAdd;
      job.tables.push_back(t);
    }
    PS_RETURN_IF_ERROR(job.Validate());
    const bool own_ports = shards > 1 || factor > 1;
    for (uint32_t i = 0; i < shards; ++i) {
      for (uint32_t j = 1; j < factor; ++j) {
        PS_ASSIGN_OR_RETURN(auto backup, BackupServer::Create(job, i, j));
        BackupServer* b = backup.get();
        o->backups_.push_back(std::move(backup));
        o->threads_.emplace_back([b] { b->Run().IgnoreError(); });
      }
    }
    o->server_status_.resize(shards);
    std::vector<std::string> endpoints;
    for (uint32_t i = 0; i < shards; ++i) {
      PS_ASSIGN_OR_RETURN(auto server,
                          ShardServer::Create(job, i, own_ports ? "" : "tcp://127.0.0.1:*"));
      if (metrics) {
        PS_ASSIGN_OR_RETURN(auto endpoint,
                            MetricsEndpoint::Start("127.0.0.1", 0, "shard " + std::to_string(i)));
        server->SetMetricsEndpoint(endpoint.get());
        o->metrics_.push_back(std::move(endpoint));
      }
      endpoints.push_back(server->endpoint());
      o->servers_.push_back(std::move(server));
    }
    for (uint32_t i = 0; i < shards; ++i) {
      o->threads_.emplace_back(
          [s = o->servers_[i].get(), st = &o->server_status_[i]] { *st = s->Run(); });
    }
    PS_ASSIGN_OR_RETURN(o->client_, Client::Create(job, 0, endpoints));
    o->pushes_.assign(sizes.size(), 0);
    o->values_.resize(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      o->values_[i] = std::make_shared<const std::vector<float>>(sizes[i] / sizeof(float), 1.0f);
    }
    return o;
  }
  ~Ours() { StopServer().IgnoreError(); }

  // true: pulls copy into a caller buffer; false: they keep the received frames.
  void set_pull_into_buffer(bool into_buffer) { pull_into_buffer_ = into_buffer; }

  // Stops the shards (their backups end with them) and waits for all.
  Status StopServer() {
    for (auto& s : servers_) s->Stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    for (const Status& s : server_status_) PS_RETURN_IF_ERROR(s);
    return Status::Ok();
  }

  Status Run(OpKind op, uint32_t table, int depth, const Limits& limits, Sample* out) {
    const uint64_t rows = job_.tables[table].rows;
    if (outs_.size() < static_cast<size_t>(depth)) outs_.resize(depth);
    if (views_.size() < static_cast<size_t>(depth)) views_.resize(depth);
    if (pull_into_buffer_) {
      for (int i = 0; i < depth; ++i) outs_[i].resize(rows);
    }
    const SharedFloats values = SharedFloats::Of(values_[table]);
    Status failure;
    uint64_t issued = 0;
    int outstanding = 0;
    const Clock::time_point t0 = Clock::now();
    Clock::time_point last_done = t0;
    auto should_issue = [&](Clock::time_point now) {
      return failure.ok() && (issued < limits.min_ops || Seconds(now - t0) < limits.seconds);
    };
    auto fail = [&](const Status& s) {
      if (failure.ok()) failure = s;
    };
    std::function<void(int)> start_op;
    // Completion of a whole operation (push, pull, or the pull of push+pull).
    auto finish_op = [&](int slot, Clock::time_point start, const Status& s) {
      --outstanding;
      if (!s.ok()) return fail(s);
      const Clock::time_point now = Clock::now();
      out->latencies_us.push_back(Micros(now - start));
      ++out->ops;
      last_done = now;
      if (should_issue(now)) start_op(slot);
    };
    auto issue_pull = [&](int slot, Clock::time_point start) {
      auto done = [&, slot, start](const Status& s) { finish_op(slot, start, s); };
      auto t = pull_into_buffer_ ? client_->PullDense(table, outs_[slot].data(), done)
                                 : client_->PullDense(table, &views_[slot], done);
      if (!t.ok()) {
        --outstanding;
        fail(t.status());
      }
    };
    start_op = [&](int slot) {
      const Clock::time_point start = Clock::now();
      ++issued;
      ++outstanding;
      if (op == OpKind::kPull) return issue_pull(slot, start);
      auto t = client_->PushDense(table, values, [&, slot, start](const Status& s) {
        if (s.ok()) ++pushes_[table];
        if (s.ok() && op == OpKind::kPushPull) return issue_pull(slot, start);
        finish_op(slot, start, s);
      });
      if (!t.ok()) {
        --outstanding;
        fail(t.status());
      }
    };
    for (int i = 0; i < depth; ++i) start_op(i);
    while (outstanding > 0) {
      Status s = client_->Poll(1000);
      if (!s.ok()) return s.WithContext("client poll");
    }
    if (!failure.ok()) return failure.WithContext(std::string("ours ") + OpLabel(op));
    out->seconds = Seconds(last_done - t0);
    return Status::Ok();
  }

  // Pulls every table and checks each value equals the number of
  // acknowledged pushes to it (every push adds 1.0 to every value).
  Status Verify() {
    for (uint32_t t = 0; t < job_.tables.size(); ++t) {
      std::vector<float> got(job_.tables[t].rows, -1.0f);
      PS_ASSIGN_OR_RETURN(Ticket ticket, client_->PullDense(t, got.data()));
      PS_RETURN_IF_ERROR(client_->Wait(ticket));
      const auto want = static_cast<float>(pushes_[t]);
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] != want) {
          return DataLossError("table '" + job_.tables[t].name + "' row " + std::to_string(i) +
                               " holds " + std::to_string(got[i]) + " after " +
                               std::to_string(pushes_[t]) + " acknowledged pushes of 1.0");
        }
      }
    }
    const ClientCounters& c = client_->counters();
    if (c.errors != 0 || c.timeouts != 0 || c.late_replies != 0) {
      return DataLossError("client counted " + std::to_string(c.errors) + " errors, " +
                           std::to_string(c.timeouts) + " timeouts, " +
                           std::to_string(c.late_replies) + " late replies");
    }
    PS_RETURN_IF_ERROR(StopServer());
    for (const auto& server : servers_) {
      if (server->counters().errors != 0) {
        return DataLossError("server answered " + std::to_string(server->counters().errors) +
                             " requests with ERROR");
      }
    }
    for (const auto& b : backups_) {
      if (b->refused() != 0) return DataLossError("a backup refused replication entries");
    }
    return Status::Ok();
  }

 private:
  Ours() = default;
  JobOptions job_;
  std::vector<std::unique_ptr<MetricsEndpoint>> metrics_;  // outlive the servers' threads
  std::vector<std::unique_ptr<ShardServer>> servers_;
  std::vector<std::unique_ptr<BackupServer>> backups_;
  std::vector<std::thread> threads_;
  std::vector<Status> server_status_;
  std::unique_ptr<Client> client_;
  std::vector<std::shared_ptr<const std::vector<float>>> values_;  // per table, all 1.0
  std::vector<std::vector<float>> outs_;                           // pull buffers, one per slot
  std::vector<PulledValues> views_;                                // zero-copy pulls, one per slot
  bool pull_into_buffer_ = false;                                  // --pull-into buffer
  std::vector<uint64_t> pushes_;                                   // acknowledged, per table
};

// ---------------------------------------------------------------------------
// Statistics and printing.

struct Result {
  std::vector<double> mbps;  // per repetition
  std::vector<double> latencies_us;
  uint64_t ops = 0;
  void Add(const Sample& s, uint64_t bytes_per_op) {
    if (s.seconds <= 0) return;
    mbps.push_back(static_cast<double>(s.ops * bytes_per_op) / s.seconds / 1e6);
    latencies_us.insert(latencies_us.end(), s.latencies_us.begin(), s.latencies_us.end());
    ops += s.ops;
  }
};





// The keys of a one-worker job in a temporary folder (removed by the
// destructor), and the raw sockets' CURVE options made from them.
class BenchKeys {
 public:
  static StatusOr<std::unique_ptr<BenchKeys>> Create() {
    char tmpl[] = "/tmp/ps-transport-bench-keys-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return InternalError("mkdtemp failed");
    std::unique_ptr<BenchKeys> k(new BenchKeys(tmpl));
    PS_RETURN_IF_ERROR(WriteJobKeys(k->dir_ + "/keys", 1, false));
    JobOptions job;
    job.cluster.workers = 1;
    job.security.mode = SecurityMode::kCurve;
    job.security.keys_dir = k->dir_ + "/keys";
    PS_ASSIGN_OR_RETURN(k->server_, ServerCurve(job));
    PS_ASSIGN_OR_RETURN(k->client_, ClientCurve(job, 0));
    PS_ASSIGN_OR_RETURN(k->allowed_, ServerAllowlist(job));
    return k;
  }
  ~BenchKeys() { std::filesystem::remove_all(dir_); }
  std::string keys_dir() const { return dir_ + "/keys"; }
  const CurveOptions& server() const { return server_; }
  const CurveOptions& client() const { return client_; }
  const ZapHandler::Allowlist& allowed() const { return allowed_; }

 private:
  explicit BenchKeys(std::string dir) : dir_(std::move(dir)) {}
  const std::string dir_;
  CurveOptions server_, client_;
  ZapHandler::Allowlist allowed_;
};



// One side of a comparison: runs `op` on table `table` (of `bytes` value
// bytes) with `depth` in flight for `limits`, into *out. Empty: the side
// is not measured (--only).
using Side = std::function<Status(OpKind op, uint32_t table, uint64_t bytes, int depth,
                                  const Limits& limits, Sample* out)>;

// Every case (size x op x depth): both sides warmed up, then cfg.reps
// repetitions interleaved a, b, b, a, a, b, ... so that neither side always
// runs right after the other. One Row per case, side a as "ours".
StatusOr<std::vector<Row>> MeasureCases(const Config& cfg, const Side& side_a,
                                        const Side& side_b) {
  std::vector<Row> rows;
  for (size_t ti = 0; ti < cfg.sizes.size(); ++ti) {
    const uint64_t bytes = cfg.sizes[ti];
    const auto table = static_cast<uint32_t>(ti);
    for (OpKind op : cfg.ops) {
      const uint64_t per_op = op == OpKind::kPushPull ? 2 * bytes : bytes;
      for (int depth : cfg.depths) {
        std::fprintf(stderr, "%s %s, %d in flight ...\n", SizeLabel(bytes).c_str(), OpLabel(op),
                     depth);
        for (const Side* side : {&side_a, &side_b}) {
          Sample warm;
          if (*side) PS_RETURN_IF_ERROR((*side)(op, table, bytes, depth, cfg.warmup, &warm));
        }
        Result a, b;
        auto run = [&](const Side& side, Result* result) -> Status {
          if (!side) return Status::Ok();
          Sample sample;
          PS_RETURN_IF_ERROR(side(op, table, bytes, depth, cfg.limits, &sample));
          result->Add(sample, per_op);
          return Status::Ok();
        };
        for (int rep = 0; rep < cfg.reps; ++rep) {
          const bool a_first = rep % 2 == 0;
          PS_RETURN_IF_ERROR(a_first ? run(side_a, &a) : run(side_b, &b));
          PS_RETURN_IF_ERROR(a_first ? run(side_b, &b) : run(side_a, &a));
        }
        rows.push_back({bytes, op, depth, Median(a.mbps), Median(b.mbps),
                        Percentile(a.latencies_us, 0.5), Percentile(b.latencies_us, 0.5),
                        Percentile(a.latencies_us, 0.99), Percentile(b.latencies_us, 0.99), a.ops,
                        b.ops});
      }
    }
  }
  return rows;
}

// The side of an Ours.
Side OursSide(Ours* ours) {
  return [ours](OpKind op, uint32_t table, uint64_t, int depth, const Limits& limits,
                Sample* out) { return ours->Run(op, table, depth, limits, out); };
}

// --replication K: ours with replication.factor K against ours with
// factor 1, both with K shards (so the same requests to the same number of
// shards; only the backups differ), interleaved as in RunAll.
Status RunReplication(const Config& cfg) {
  const uint32_t k = cfg.replication;
  PS_ASSIGN_OR_RETURN(auto replicated, Ours::Create(cfg.sizes, "", k, k));
  PS_ASSIGN_OR_RETURN(auto single, Ours::Create(cfg.sizes, "", k, 1));
  replicated->set_pull_into_buffer(cfg.pull_into_buffer);
  single->set_pull_into_buffer(cfg.pull_into_buffer);
  PS_ASSIGN_OR_RETURN(const std::vector<Row> rows,
                      MeasureCases(cfg, OursSide(replicated.get()), OursSide(single.get())));
  PS_RETURN_IF_ERROR(replicated->Verify());
  PS_RETURN_IF_ERROR(single->Verify());
  std::printf("# transport_bench --replication %u: replication.factor %u against 1\n\n", k, k);
  std::printf(
      "%s; %d repetitions of %.2f s per case "
      "(interleaved); loopback TCP; %u shards on threads of this process, each with %u "
      "backups on threads (factor %u) or none (factor 1), 1 client.\n\n",
      HostLine(cfg).c_str(), cfg.reps, cfg.limits.seconds, k, k - 1, k);
  const std::string a = "factor " + std::to_string(k);
  PrintRows(rows, a, "factor 1");
  std::printf("Targets:\n\n| target | measured | met |\n|---|---|---|\n");
  for (const Row& w : rows) {
    if (w.bytes != (1u << 20) || w.op != OpKind::kPush) continue;
    const double ratio = w.ours_p50 / w.raw_p50;
    std::printf("| 1 MiB push, %d in flight: p50 latency <= 1.5x factor 1 | %.2fx | %s |\n",
                w.depth, ratio, ratio <= 1.5 ? "yes" : "NO");
  }
  std::printf("\nAll requests succeeded; every table holds exactly the sum of its acknowledged "
              "pushes, and every backup refused no entry.\n");
  return Status::Ok();
}

// --metrics: one shard serving its metrics (every request counted and
// timed by op, the text written every second) against the same shard
// serving none, interleaved.
Status RunMetrics(const Config& cfg) {
  PS_ASSIGN_OR_RETURN(auto with, Ours::Create(cfg.sizes, "", 1, 1, /*metrics=*/true));
  PS_ASSIGN_OR_RETURN(auto without, Ours::Create(cfg.sizes, "", 1, 1, /*metrics=*/false));
  with->set_pull_into_buffer(cfg.pull_into_buffer);
  without->set_pull_into_buffer(cfg.pull_into_buffer);
  PS_ASSIGN_OR_RETURN(const std::vector<Row> rows,
                      MeasureCases(cfg, OursSide(with.get()), OursSide(without.get())));
  PS_RETURN_IF_ERROR(with->Verify());
  PS_RETURN_IF_ERROR(without->Verify());
  std::printf("# transport_bench --metrics: a shard serving its metrics against one serving "
              "none\n\n");
  std::printf("%s; %d repetitions of %.2f s per case "
              "(interleaved); loopback TCP; 1 shard on a thread of this process, 1 client.\n\n",
              HostLine(cfg).c_str(), cfg.reps, cfg.limits.seconds);
  PrintRows(rows, "metrics on", "metrics off");
  std::printf("All requests succeeded; every table holds exactly the sum of its acknowledged "
              "pushes.\n");
  return Status::Ok();
}

Status RunAll(const Config& cfg) {
  const uint64_t max_bytes = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  std::unique_ptr<BenchKeys> keys;
  if (cfg.curve) {
    PS_ASSIGN_OR_RETURN(keys, BenchKeys::Create());
  }
  PS_ASSIGN_OR_RETURN(auto ours, Ours::Create(cfg.sizes, keys ? keys->keys_dir() : ""));
  ours->set_pull_into_buffer(cfg.pull_into_buffer);
  // The same socket options as ShardServer and Client use.
  SocketOptions router_opts;
  router_opts.max_frame_bytes = static_cast<int64_t>(JobOptions{}.server.max_request_bytes * 2);
  SocketOptions dealer_opts;
  if (keys) {
    router_opts.curve = keys->server();
    dealer_opts.curve = keys->client();
  }
  PS_ASSIGN_OR_RETURN(auto raw_server,
                      RawServer::Create(RawServer::Mode::kEcho, max_bytes, router_opts,
                                        keys ? keys->allowed() : ZapHandler::Allowlist{}));
  raw_server->Start();
  PS_ASSIGN_OR_RETURN(auto raw,
                      RawClient::Create(raw_server->endpoint(), max_bytes, dealer_opts));

  Side raw_side;
  if (cfg.run_raw) {
    raw_side = [r = raw.get()](OpKind op, uint32_t, uint64_t bytes, int depth,
                               const Limits& limits, Sample* out) {
      return r->Run(op, bytes, depth, limits, out);
    };
  }
  PS_ASSIGN_OR_RETURN(const std::vector<Row> rows,
                      MeasureCases(cfg, cfg.run_ours ? OursSide(ours.get()) : Side(), raw_side));

  // Ours 8-in-flight pushes vs the raw one-way message rate (and raw
  // request/ack with 8 in flight, for scale), interleaved.
  const uint64_t ow_bytes = cfg.oneway_bytes;
  auto ow_it = std::find(cfg.sizes.begin(), cfg.sizes.end(), ow_bytes);
  const bool do_oneway = cfg.oneway && cfg.run_ours && cfg.run_raw && ow_it != cfg.sizes.end();
  double ow_ours = 0, ow_raw_reqrep = 0, ow_raw = 0;
  if (do_oneway) {
    std::fprintf(stderr, "one-way %s ...\n", SizeLabel(ow_bytes).c_str());
    const auto table = static_cast<uint32_t>(ow_it - cfg.sizes.begin());
    SocketOptions sink_opts = router_opts;
    sink_opts.send_hwm = sink_opts.recv_hwm = 1000;  // ZeroMQ's default: a bounded queue
    PS_ASSIGN_OR_RETURN(auto sink, RawServer::Create(RawServer::Mode::kSink, 0, sink_opts,
                                                     keys ? keys->allowed()
                                                          : ZapHandler::Allowlist{}));
    sink->Start();
    SocketOptions sender_opts = dealer_opts;
    sender_opts.send_hwm = sender_opts.recv_hwm = 1000;
    PS_ASSIGN_OR_RETURN(auto sender, RawClient::Create(sink->endpoint(), ow_bytes, sender_opts));
    const uint64_t warm_n = std::max<uint64_t>(cfg.oneway_messages / 10, 100);
    sink->SetSinkBatch(warm_n);
    PS_RETURN_IF_ERROR(sender->SendOneWay(ow_bytes, warm_n));
    PS_RETURN_IF_ERROR(sink->NextSinkRate().status());
    sink->SetSinkBatch(cfg.oneway_messages);
    std::vector<double> ours_rate, reqrep_rate, raw_rate;
    for (int rep = 0; rep < cfg.reps; ++rep) {
      Sample so, sr;
      PS_RETURN_IF_ERROR(ours->Run(OpKind::kPush, table, 8, cfg.limits, &so));
      ours_rate.push_back(static_cast<double>(so.ops) / so.seconds);
      PS_RETURN_IF_ERROR(raw->Run(OpKind::kPush, ow_bytes, 8, cfg.limits, &sr));
      reqrep_rate.push_back(static_cast<double>(sr.ops) / sr.seconds);
      PS_RETURN_IF_ERROR(sender->SendOneWay(ow_bytes, cfg.oneway_messages));
      PS_ASSIGN_OR_RETURN(double rate, sink->NextSinkRate());
      raw_rate.push_back(rate);
    }
    PS_RETURN_IF_ERROR(sink->Stop());
    ow_ours = Median(ours_rate);
    ow_raw_reqrep = Median(reqrep_rate);
    ow_raw = Median(raw_rate);
  }

  // Nothing is printed before every request succeeded and the tables check out.
  PS_RETURN_IF_ERROR(raw_server->Stop());
  PS_RETURN_IF_ERROR(ours->Verify());

  std::printf("# transport_bench: ours (ShardServer + Client) vs raw ZeroMQ%s\n\n",
              cfg.curve ? ", both under CurveZMQ" : "");
  std::printf(
      "%s; %d repetitions of %.2f s per case "
      "(ours and raw interleaved); loopback TCP, 1 server thread + 1 client, "
      "1 I/O thread each.\n\n",
      HostLine(cfg).c_str(), cfg.reps, cfg.limits.seconds);
  std::printf(
      "Throughput: median of the repetitions, MB/s (10^6 bytes of values moved per "
      "second; push+pull counts both directions). Latency: p50/p99 of all operations, "
      "microseconds. Ratio = ours/raw: higher is better for MB/s, lower is better for "
      "latency.\n\n");
  PrintRows(rows, "ours", "raw");

  if (do_oneway) {
    std::printf("Message rate, %s (median of %d repetitions, interleaved):\n\n",
                SizeLabel(ow_bytes).c_str(), cfg.reps);
    std::printf("| workload | msgs/s | ratio to raw one-way |\n|---|---:|---:|\n");
    std::printf("| raw one-way: DEALER sends, ROUTER only receives (%" PRIu64
                " messages, counted on the receiver) | %.0f | 1.00 |\n",
                cfg.oneway_messages, ow_raw);
    std::printf("| raw request/ack, 8 in flight (acks/s) | %.0f | %.2f |\n", ow_raw_reqrep,
                ow_raw_reqrep / ow_raw);
    std::printf("| ours push, 8 in flight (acknowledged pushes/s) | %.0f | %.2f |\n\n", ow_ours,
                ow_ours / ow_raw);
  }

  if (cfg.run_ours && cfg.run_raw) {
    PrintTargets(cfg, rows, do_oneway ? ow_ours / ow_raw : -1.0);
  }
  std::printf(
      "All requests succeeded; every table holds exactly the sum of its acknowledged "
      "pushes.\n");
  return Status::Ok();
}

}  // namespace
}  // namespace ps::transport_bench

int main(int argc, char** argv) {
  ps::KeepMessageMemory();
  CLI::App app{"Parameter-server push/pull throughput and latency vs raw ZeroMQ (loopback TCP)"};
  bool quick = false;
  int reps = 5;
  double seconds = 0.3;
  std::vector<std::string> sizes = {"4K", "64K", "1M", "16M"};
  std::vector<int> depths = {1, 8};
  std::vector<std::string> ops = {"push", "pull", "pushpull"};
  uint64_t oneway_messages = 50000;
  std::string only = "both";
  std::string pull_into = "view";
  app.add_flag("--quick", quick, "Smoke test: 1 repetition, a few operations per case");
  app.add_option("--reps", reps, "Repetitions per case (ours and raw interleaved)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--time", seconds, "Seconds per repetition")->check(CLI::Range(0.001, 60.0));
  app.add_option("--sizes", sizes, "Value bytes per request (e.g. 4K,64K,1M,16M)")->delimiter(',');
  app.add_option("--depths", depths, "Requests in flight (e.g. 1,8)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  app.add_option("--ops", ops, "Operations: push, pull, pushpull")
      ->delimiter(',')
      ->check(CLI::IsMember({"push", "pull", "pushpull"}));
  app.add_option("--oneway-messages", oneway_messages, "Messages per raw one-way repetition")
      ->check(CLI::Range(uint64_t{100}, uint64_t{100000000}));
  app.add_option("--only", only, "Measure only one side, for profiling: ours, raw or both")
      ->check(CLI::IsMember({"ours", "raw", "both"}));
  bool curve = false;
  app.add_flag("--curve", curve, "Both sides under CurveZMQ (ours: security.mode curve)");
  app.add_option("--pull-into", pull_into,
                 "Where ours pull puts values: view (received frames, no copy) or buffer")
      ->check(CLI::IsMember({"view", "buffer"}));
  uint32_t replication = 1;
  app.add_option("--replication", replication,
                 "K >= 2: ours with replication.factor K (K shards, K - 1 backups each) against "
                 "ours with factor 1 and K shards, instead of ours against raw ZeroMQ")
      ->check(CLI::Range(1, 8));
  bool metrics = false;
  app.add_flag("--metrics",
               metrics, "Ours serving its metrics (metrics.port) against ours serving none, "
                        "instead of ours against raw ZeroMQ");
  uint32_t busy_cores = 0;
  app.add_option("--busy-cores", busy_cores,
                 "Keep N cores busy with spinning processes while measuring, as a worker "
                 "host's data loading and compute do (0: an idle host)")
      ->check(CLI::Range(0, 256));
  CLI11_PARSE(app, argc, argv);

  // Before any thread starts: the busy processes are forked.
  auto busy = ps::BusyCores::Start(busy_cores);
  if (!busy.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n", busy.status().ToString().c_str());
    return 1;
  }
  ps::Status log = ps::InitLogging("transport_bench", "warn");
  if (!log.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n", log.ToString().c_str());
    return 1;
  }
  ps::transport_bench::Config cfg;
  for (const std::string& s : sizes) {
    auto b = ps::transport_bench::ParseSize(s);
    if (!b.ok()) {
      std::fprintf(stderr, "transport_bench: %s\n", b.status().ToString().c_str());
      return 2;
    }
    if (std::find(cfg.sizes.begin(), cfg.sizes.end(), *b) == cfg.sizes.end())
      cfg.sizes.push_back(*b);
  }
  if (cfg.sizes.empty()) {
    std::fprintf(stderr, "transport_bench: --sizes is empty\n");
    return 2;
  }
  cfg.depths = depths;
  cfg.pull_into_buffer = pull_into == "buffer";
  cfg.curve = curve;
  cfg.ops.clear();
  for (const std::string& o : ops) {
    cfg.ops.push_back(o == "push"   ? ps::transport_bench::OpKind::kPush
                      : o == "pull" ? ps::transport_bench::OpKind::kPull
                                    : ps::transport_bench::OpKind::kPushPull);
  }
  cfg.reps = reps;
  cfg.limits.seconds = seconds;
  cfg.oneway_messages = oneway_messages;
  cfg.run_ours = only != "raw";
  cfg.run_raw = only != "ours";
  if (quick) {
    cfg.reps = 1;
    cfg.limits = {0.01, 3};
    cfg.warmup = {0.0, 1};
    cfg.oneway_messages = 2000;
  }
  cfg.replication = replication;
  cfg.busy_cores = busy_cores;
  ps::Status s = metrics           ? ps::transport_bench::RunMetrics(cfg)
                 : replication > 1 ? ps::transport_bench::RunReplication(cfg)
                                   : ps::transport_bench::RunAll(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "transport_bench: FAILED: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
