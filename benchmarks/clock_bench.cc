// clock_bench: clock throughput of the consistency modes (BSP, SSP, ASP)
// with and without a straggler, in one run, so SSP / BSP and ASP / BSP are
// printed side by side.
//
// Layout: 2 shards, each a ShardServer on a thread of this process bound to
// tcp://127.0.0.1:<free port>; 4 workers, each a Client on a thread of its
// own (own ZeroMQ context, 1 I/O thread, heartbeats on with the default
// liveness options). One dense table "w" of 1,000,000 rows, dim 1,
// optimizer `add`, so every shard holds 500,000 floats (2 MB).
//
// A worker Join()s, waits until every worker has joined, then runs clocks:
//   1. PullDense of the whole table into a buffer of its own (4 MB). The
//      client's parameter cache serves it when every row is fresh enough for
//      the staleness bound (ssp only: bsp needs the current clock, which a
//      cached row never has, and asp has no cache); otherwise the pull goes
//      to both shards and may wait there for slower workers.
//   2. Compute: sleep --compute-ms (default 20 ms; a sleep, not a busy
//      loop, so four workers do not fight two cores for fake work).
//   3. StragglerInjector::HoldBack(the measured compute time) with the
//      cell's straggler options: the slow worker sleeps (factor - 1) x its
//      compute time more; with --pauses any worker may pause whole steps.
//      The slowdown applies to compute only; pulls and pushes take what
//      they take for everyone.
//   4. PushDense of a gradient of 2^-20 (about 1e-6) in every row,
//      zero-copy; Clock(); then wait for both acknowledgements.
//
// Stopping: every worker runs until the cell's wall time is up (a shared
// flag checked before each clock), finishes the clock it is in, then
// Leave()s. Leaving takes a worker out of every shard's minimum clock, so a
// faster worker blocked behind it in a pull is released and no mode can
// deadlock at the end: the slowest worker is never blocked (its own pulls
// are always within the bound), so it leaves first and frees the next.
// Only clocks that completed before the stop time count; clocks/s =
// counted clocks / wall time of the cell.
//
// Cells: modes bsp, ssp 1, ssp 3, asp; straggler settings "none" and
// "worker 3 at 3x" (stragglers.slow_worker 3, slow_factor 3), and with
// --pauses also "random pauses" (every worker pauses with probability 0.05
// after a step, for 1..3 steps). Each cell starts a fresh cluster and runs
// --reps times (default 3) for --seconds each (default 3 s; --quick 0.3 s
// and 1 repetition, the ctest smoke test). --cache off runs every cell
// with client.cache: false, to separate what the cache saves from what its
// bookkeeping costs; --compute-ms sets the compute time.
//
// Reported per cell:
//   fast clocks/s     mean over workers 0-2 of clocks/s, median over reps
//   vs bsp            that, divided by bsp's in the same straggler setting
//   w3 clocks/s       worker 3 (the straggler in the second setting), median
//   cache hit rate    PullDense calls of workers 0-2 served by the cache,
//                     over all their PullDense calls (all reps pooled)
//   MB saved/s        value bytes the cache kept off the network, per fast
//                     worker per second (10^6 bytes)
//   pull share        time workers 0-2 spent in PullDense until the values
//                     were in the buffer, over their time in the loop (all
//                     reps pooled): transfer plus waiting for slower workers
//                     at the shard (asp shows the transfer alone)
//   pulls waited      shard 0's pulls_waited, mean per repetition
//   max lead          shard 0's max_blocked_lead, max over repetitions
//                     (bsp blocks at a lead of 1, ssp s at s + 1)
//
// Any failed request, a client counter of errors, timeouts, late replies
// or bound violations, a shard ERROR reply, or a table that does not hold
// exactly (acknowledged pushes x 2^-20) in every row afterwards makes the
// program print the error and exit 1; no table is printed from a failed run.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchmarks/machine.h"
#include "client/client.h"
#include "common/logging.h"
#include "common/options.h"
#include "common/status.h"
#include "server/shard_server.h"
#include "worker/straggler.h"

namespace ps {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kWorkers = 4;
constexpr uint32_t kShards = 2;
constexpr uint64_t kRows = 1000000;
constexpr uint32_t kSlowWorker = kWorkers - 1;
// Exactly representable, and so is every sum of up to 2^24 of them: the
// final table can be checked for equality.
constexpr float kGradient = 1.0f / (1 << 20);

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

enum class Setting { kNone, kStraggler, kPauses };

const char* SettingLabel(Setting s) {
  switch (s) {
    case Setting::kNone:
      return "none";
    case Setting::kStraggler:
      return "worker 3 at 3x";
    case Setting::kPauses:
      return "random pauses";
  }
  return "?";
}

StragglerOptions StragglersFor(Setting s) {
  StragglerOptions o;
  if (s == Setting::kStraggler) {
    o.slow_worker = kSlowWorker;
    o.slow_factor = 3.0;
  } else if (s == Setting::kPauses) {
    o.pause_probability = 0.05;
    o.pause_min_steps = 1;
    o.pause_max_steps = 3;
  }
  return o;
}

ConsistencyOptions Mode(ConsistencyMode mode, uint32_t staleness = 0) {
  ConsistencyOptions c;
  c.mode = mode;
  c.staleness = staleness;
  return c;
}

// One worker's share of one repetition.
struct WorkerResult {
  uint64_t clocks = 0;        // clocks completed before the stop time
  double loop_seconds = 0;    // time in those clocks
  double pull_seconds = 0;    // ... of which in PullDense until the values were there
  uint64_t pulls = 0;         // PullDense calls in those clocks
  uint64_t cached_pulls = 0;  // ... served by the parameter cache
  uint64_t pushes = 0;        // acknowledged PushDense calls (all, also after the stop)
  ClientCounters counters;    // the client's, at the end
  Status status;
};

// What the workers of one repetition share.
struct Shared {
  Shared() : joined(kWorkers + 1), go(1) {}
  std::latch joined;  // every worker joined (or failed to), and the main thread
  std::latch go;      // counted down by the main thread once start/stop_at are set
  SteadyClock::time_point start;
  SteadyClock::time_point stop_at;
  std::atomic<bool> stop{false};
};

Status WorkerLoop(Client* client, const JobOptions& job, uint32_t rank,
                  std::chrono::milliseconds compute, Shared* shared, WorkerResult* out) {
  StragglerInjector straggler(job.stragglers, rank);
  std::vector<float> params(kRows);
  const SharedFloats gradient =
      SharedFloats::Of(std::make_shared<const std::vector<float>>(kRows, kGradient));
  while (!shared->stop.load(std::memory_order_relaxed)) {
    const SteadyClock::time_point t0 = SteadyClock::now();
    const uint64_t hits_before = client->counters().cache_hits;
    PS_ASSIGN_OR_RETURN(Ticket pull, client->PullDense(0, params.data()));
    PS_RETURN_IF_ERROR(client->Wait(pull));
    const bool cached = client->counters().cache_hits != hits_before;
    const SteadyClock::time_point t1 = SteadyClock::now();
    std::this_thread::sleep_for(compute);
    straggler.HoldBack(SteadyClock::now() - t1);
    PS_ASSIGN_OR_RETURN(Ticket push, client->PushDense(0, gradient));
    PS_ASSIGN_OR_RETURN(Ticket clock, client->Clock());
    PS_RETURN_IF_ERROR(client->Wait(push));
    ++out->pushes;
    PS_RETURN_IF_ERROR(client->Wait(clock));
    const SteadyClock::time_point t2 = SteadyClock::now();
    if (t2 <= shared->stop_at) {
      ++out->clocks;
      ++out->pulls;
      out->cached_pulls += cached ? 1 : 0;
      out->loop_seconds += Seconds(t2 - t0);
      out->pull_seconds += Seconds(t1 - t0);
    }
  }
  return Status::Ok();
}

// One worker thread. Always arrives at `shared->joined`, so a failed worker
// cannot hang the others at the start; on a failure it stops the run.
void RunWorker(const JobOptions& job, uint32_t rank, const std::vector<std::string>& endpoints,
               std::chrono::milliseconds compute, Shared* shared, WorkerResult* out) {
  auto client = Client::Create(job, rank, endpoints);
  Status s = client.ok() ? (*client)->Join() : client.status();
  shared->joined.arrive_and_wait();
  shared->go.wait();
  if (s.ok()) s = WorkerLoop(client->get(), job, rank, compute, shared, out);
  if (!s.ok()) shared->stop.store(true, std::memory_order_relaxed);
  if (client.ok()) {
    // Leave even after a failure, so no other worker waits for this one.
    Status left = (*client)->Leave();
    if (s.ok()) s = left;
    out->counters = (*client)->counters();
  }
  if (s.ok()) {
    const ClientCounters& c = out->counters;
    if (c.errors != 0 || c.timeouts != 0 || c.late_replies != 0 || c.bound_violations != 0) {
      s = DataLossError("client counted " + std::to_string(c.errors) + " errors, " +
                        std::to_string(c.timeouts) + " timeouts, " +
                        std::to_string(c.late_replies) + " late replies, " +
                        std::to_string(c.bound_violations) + " bound violations");
    }
  }
  out->status = s.WithContext("worker " + std::to_string(rank));
}

// The shards of one repetition on threads; stopped and joined when it goes away.
class Cluster {
 public:
  static StatusOr<std::unique_ptr<Cluster>> Create(const JobOptions& job) {
    std::unique_ptr<Cluster> c(new Cluster());
    for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
      PS_ASSIGN_OR_RETURN(auto server, ShardServer::Create(job, s, "tcp://127.0.0.1:*"));
      c->endpoints_.push_back(server->endpoint());
      c->servers_.push_back(std::move(server));
    }
    c->statuses_.resize(c->servers_.size());
    for (size_t i = 0; i < c->servers_.size(); ++i) {
      c->threads_.emplace_back([srv = c->servers_[i].get(), st = &c->statuses_[i]] {
        *st = srv->Run();
      });
    }
    return c;
  }
  ~Cluster() { Stop().IgnoreError(); }

  // Stops and joins every shard; returns the first error a Run() returned.
  Status Stop() {
    for (auto& s : servers_) s->Stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    for (const Status& s : statuses_) {
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // REQUIRES: Stop() first.
  const ShardServer& server(size_t i) const { return *servers_[i]; }

 private:
  Cluster() = default;
  std::vector<std::unique_ptr<ShardServer>> servers_;
  std::vector<std::thread> threads_;
  std::vector<Status> statuses_;
  std::vector<std::string> endpoints_;
};

struct RepResult {
  std::vector<WorkerResult> workers;
  ShardServerCounters shard0;
};

StatusOr<RepResult> RunRep(const ConsistencyOptions& consistency, Setting setting, double seconds,
                           std::chrono::milliseconds compute, bool cache) {
  JobOptions job;
  job.cluster.servers = {"127.0.0.1:1", "127.0.0.1:2"};  // not used: shards bind free ports
  job.cluster.workers = kWorkers;
  TableOptions t;
  t.name = "w";
  t.rows = kRows;
  t.dim = 1;
  t.optimizer.kind = OptimizerKind::kAdd;
  job.tables.push_back(t);
  job.consistency = consistency;
  job.stragglers = StragglersFor(setting);
  job.client.cache = cache;
  PS_RETURN_IF_ERROR(job.Validate());

  PS_ASSIGN_OR_RETURN(auto cluster, Cluster::Create(job));
  RepResult rep;
  rep.workers.resize(kWorkers);
  Shared shared;
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorkers; ++r) {
    threads.emplace_back(RunWorker, std::cref(job), r, std::cref(cluster->endpoints()), compute,
                         &shared, &rep.workers[r]);
  }
  shared.joined.arrive_and_wait();
  shared.start = SteadyClock::now();
  shared.stop_at = shared.start + std::chrono::duration_cast<SteadyClock::duration>(
                                      std::chrono::duration<double>(seconds));
  shared.go.count_down();
  // Wakes early when a worker failed and set the flag.
  while (!shared.stop.load(std::memory_order_relaxed) && SteadyClock::now() < shared.stop_at) {
    std::this_thread::sleep_for(std::min<SteadyClock::duration>(
        std::chrono::milliseconds(10), shared.stop_at - SteadyClock::now()));
  }
  shared.stop.store(true, std::memory_order_relaxed);
  for (auto& th : threads) th.join();
  PS_RETURN_IF_ERROR(cluster->Stop());
  for (const WorkerResult& w : rep.workers) PS_RETURN_IF_ERROR(w.status);

  uint64_t pushes = 0;
  for (const WorkerResult& w : rep.workers) pushes += w.pushes;
  const float want = static_cast<float>(pushes) * kGradient;
  for (uint32_t s = 0; s < kShards; ++s) {
    const ShardServer& server = cluster->server(s);
    if (server.counters().errors != 0) {
      return DataLossError("shard " + std::to_string(s) + " answered " +
                           std::to_string(server.counters().errors) + " requests with ERROR");
    }
    const std::vector<float> values = server.store().CopyValues(0);
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] != want) {
        return DataLossError("shard " + std::to_string(s) + " row offset " + std::to_string(i) +
                             " holds " + std::to_string(values[i]) + ", want " +
                             std::to_string(want) + " after " + std::to_string(pushes) +
                             " acknowledged pushes of 2^-20");
      }
    }
  }
  rep.shard0 = cluster->server(0).counters();
  return rep;
}

struct Cell {
  Setting setting;
  std::string mode;
  bool is_bsp = false;
  double fast_cps = 0;  // median over reps
  double slow_cps = 0;  // median over reps
  double hit_rate = 0;
  double mb_saved_per_s = 0;
  double pull_share = 0;
  double pulls_waited = 0;  // mean per rep
  int64_t max_lead = 0;
  double w3_pull_share = 0;
};

StatusOr<Cell> RunCell(const ConsistencyOptions& consistency, Setting setting, int reps,
                       double seconds, std::chrono::milliseconds compute, bool cache) {
  Cell cell;
  cell.setting = setting;
  cell.mode = ConsistencyName(consistency);
  cell.is_bsp = consistency.mode == ConsistencyMode::kBsp;
  std::vector<double> fast, slow;
  uint64_t pulls = 0, cached = 0, saved = 0, waited = 0;
  double pull_s = 0, loop_s = 0, w3_pull_s = 0, w3_loop_s = 0;
  for (int r = 0; r < reps; ++r) {
    PS_ASSIGN_OR_RETURN(RepResult rep, RunRep(consistency, setting, seconds, compute, cache));
    double sum = 0;
    for (uint32_t w = 0; w < kWorkers; ++w) {
      const WorkerResult& wr = rep.workers[w];
      const double cps = static_cast<double>(wr.clocks) / seconds;
      if (w == kSlowWorker) {
        slow.push_back(cps);
        w3_pull_s += wr.pull_seconds;
        w3_loop_s += wr.loop_seconds;
        continue;
      }
      sum += cps;
      pulls += wr.pulls;
      cached += wr.cached_pulls;
      saved += wr.counters.cache_bytes_saved;
      pull_s += wr.pull_seconds;
      loop_s += wr.loop_seconds;
    }
    fast.push_back(sum / (kWorkers - 1));
    waited += rep.shard0.pulls_waited;
    cell.max_lead = std::max(cell.max_lead, rep.shard0.max_blocked_lead);
  }
  cell.fast_cps = Median(fast);
  cell.slow_cps = Median(slow);
  cell.hit_rate = pulls == 0 ? 0 : static_cast<double>(cached) / static_cast<double>(pulls);
  cell.mb_saved_per_s = static_cast<double>(saved) / 1e6 / (kWorkers - 1) / reps / seconds;
  cell.pull_share = loop_s == 0 ? 0 : pull_s / loop_s;
  cell.w3_pull_share = w3_loop_s == 0 ? 0 : w3_pull_s / w3_loop_s;
  cell.pulls_waited = static_cast<double>(waited) / reps;
  return cell;
}


struct Config {
  double seconds = 3.0;
  int reps = 3;
  std::chrono::milliseconds compute{20};
  bool pauses = false;
  bool cache = true;  // client.cache; --cache off isolates what the cache costs
};

Status RunAll(const Config& cfg) {
  const std::vector<ConsistencyOptions> modes = {
      Mode(ConsistencyMode::kBsp), Mode(ConsistencyMode::kSsp, 1), Mode(ConsistencyMode::kSsp, 3),
      Mode(ConsistencyMode::kAsp)};
  std::vector<Setting> settings = {Setting::kNone, Setting::kStraggler};
  if (cfg.pauses) settings.push_back(Setting::kPauses);

  std::vector<Cell> cells;
  const SteadyClock::time_point began = SteadyClock::now();
  for (Setting setting : settings) {
    for (const ConsistencyOptions& mode : modes) {
      std::fprintf(stderr, "%s, stragglers: %s ...\n", ConsistencyName(mode).c_str(),
                   SettingLabel(setting));
      PS_ASSIGN_OR_RETURN(Cell cell, RunCell(mode, setting, cfg.reps, cfg.seconds, cfg.compute, cfg.cache));
      cells.push_back(cell);
    }
  }
  const double total = Seconds(SteadyClock::now() - began);

  std::printf("# clock_bench: clocks/s of bsp, ssp and asp, with and without a straggler\n\n");
  std::printf(
      "%u hardware threads, CPU %s. %u workers and %u shards on threads of one process "
      "(loopback TCP); table of %" PRIu64
      " floats (dim 1, add); per clock: PullDense (4 MB unless "
      "cached), %lld ms compute (sleep), straggler hold-back, PushDense (4 MB), Clock. "
      "Parameter cache %s. %d repetition(s) of %.2f s per cell; %.0f s in all.\n\n",
      std::thread::hardware_concurrency(), CpuModel().c_str(), kWorkers, kShards, kRows,
      static_cast<long long>(cfg.compute.count()), cfg.cache ? "on (client.cache: true)" : "off",
      cfg.reps, cfg.seconds, total);
  std::printf(
      "fast = workers 0-2 (mean), w3 = worker 3 (the straggler when there is one); clocks/s "
      "are medians over repetitions; vs bsp = fast clocks/s / bsp's in the same straggler "
      "setting. Cache hit rate: pulls of the fast workers served by the parameter cache; MB "
      "saved/s: per fast worker. Pull share: time in PullDense (transfer + waiting at the "
      "shard) / time in the loop, fast workers (and w3). Pulls waited (mean per repetition) "
      "and max lead: shard 0.\n\n");
  std::printf(
      "| stragglers | mode | fast clocks/s | vs bsp | w3 clocks/s | cache hit rate | MB saved/s "
      "| pull share fast | pull share w3 | pulls waited | max lead |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Cell& c : cells) {
    double bsp = 0;
    for (const Cell& b : cells) {
      if (b.setting == c.setting && b.is_bsp) bsp = b.fast_cps;
    }
    std::printf("| %s | %s | %.1f | %.2f | %.1f | %.0f%% | %.0f | %.0f%% | %.0f%% | %.0f | %" PRId64
                " |\n",
                SettingLabel(c.setting), c.mode.c_str(), c.fast_cps, bsp > 0 ? c.fast_cps / bsp : 0,
                c.slow_cps, 100 * c.hit_rate, c.mb_saved_per_s, 100 * c.pull_share,
                100 * c.w3_pull_share, c.pulls_waited, c.max_lead);
  }
  std::printf(
      "\nAll requests succeeded; after every repetition each shard held exactly "
      "(acknowledged pushes x 2^-20) in every row.\n");
  return Status::Ok();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  CLI::App app{"Clock throughput of bsp, ssp and asp with and without a straggler"};
  bool quick = false;
  ps::Config cfg;
  int compute_ms = 20;
  app.add_flag("--quick", quick,
               "Smoke test: 0.3 s per cell and 1 repetition (unless --seconds/--reps are given)");
  app.add_option("--seconds", cfg.seconds, "Wall time of each repetition of a cell")
      ->check(CLI::Range(0.05, 600.0));
  app.add_option("--reps", cfg.reps, "Repetitions per cell (clocks/s: the median)")
      ->check(CLI::Range(1, 100));
  app.add_option("--compute-ms", compute_ms, "Simulated compute per clock (a sleep), ms")
      ->check(CLI::Range(0, 10000));
  app.add_flag("--pauses", cfg.pauses,
               "Also a third setting: every worker pauses 1..3 steps with probability 0.05");
  std::string cache = "on";
  app.add_option("--cache", cache,
                 "The client's parameter cache (client.cache): on (default) or off, to see "
                 "what it costs and saves")
      ->check(CLI::IsMember({"on", "off"}));
  CLI11_PARSE(app, argc, argv);
  cfg.cache = cache == "on";
  if (quick) {
    if (app.count("--seconds") == 0) cfg.seconds = 0.3;
    if (app.count("--reps") == 0) cfg.reps = 1;
  }
  cfg.compute = std::chrono::milliseconds(compute_ms);

  ps::Status log = ps::InitLogging("clock_bench", "warn");
  if (!log.ok()) {
    std::fprintf(stderr, "clock_bench: %s\n", log.ToString().c_str());
    return 1;
  }
  ps::Status s = ps::RunAll(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "clock_bench: FAILED: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
