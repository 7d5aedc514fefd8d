// hashed_bound_bench: a job that sees far more distinct ids than its shards
// may hold, with real processes: each shard's resident memory sampled
// through the whole run against its fixed costs plus the bound of its
// hashed table, and the evictions it took to stay there.
//
// Workload: --shards ps_server processes (default 4; the binary next to
// this one, or in --bin-dir) on loopback ports that were free, one job:
//   warm   a hashed table of 8,192 rows a shard (evict lru): it warms the
//          processes' buffers before the fixed costs are read
//   ids    a hashed table of --dim floats (default 4) under adagrad (lr
//          0.05, init uniform 0.01), evict { policy: lru }, max_rows =
//          --ids / --fraction / --shards a shard (defaults: 10^8 / 4 / 4 =
//          6.25M): the shards together hold a --fraction-th of the ids;
//          or, with --max-mb, max_mb instead (the rows it pays for,
//          HashedRows::RowsWithin, as the shard reports them)
// consistency asp (no clocks), exit_when_workers_leave false. One worker
// (Client, worker 0) pushes --ids ids never repeated (SplitMix(i) for i =
// 0, 1, ...: a bijection) to `ids` in pushes of --batch ids (default
// 16,384; the client splits each by hash slot among the shards), at most
// --depth pushes in flight (default 4), every gradient 0.01.
//
// Fixed costs: before the stream, 40 pushes and pulls of 4,096 fresh ids
// into `warm`; a shard's fixed cost is its highest resident memory over
// 20 samples 10 ms apart after them. The bound: the `ids` table's bytes at
// max_rows as the shard's STATS reports them at the end (stored_bytes of a
// full table: its rows, their ids and uses, and its index), or max_mb.
//
// Sampled on a thread of its own: each server's VmRSS (/proc/<pid>/status)
// every 100 ms, and once a second its `ids` table's rows held, bytes and
// rows evicted from STATS (through a ControlClient of its own). Reported
// per shard: fixed cost; the bound; the counted peak (the most bytes the
// table reported during the run: while its index doubles, the old index
// is counted beside the new one until its entries moved, which may be
// after the table reached max_rows); the peak RSS above the fixed cost
// against both; the RSS at the end against the bound; how many RSS samples
// were above fixed + 1.1 x the bound ("within 10% of the bound the whole
// run"); rows evicted and evictions/s (over the time the table was at its
// bound: from when the stream had sent as many ids as the shards hold to
// its end); and for the run, ids/s pushed and its wall time. A line per
// second (sums over the shards) follows the table.
//
// Bounded: the stream stops after --ids ids or --time-limit seconds
// (default 1800), whichever comes first (a stream cut short says so); every
// request has a 120 s deadline; the servers are shut down at the end, and
// killed and reaped when anything fails (WatchedProcess). --quick (10^6
// ids, batches of 4,096) is the ctest smoke test; its numbers mean
// nothing, but it fails when a shard ends without evicting, holds more
// rows than its bound, or drops a row.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchmarks/machine.h"
#include "client/client.h"
#include "client/control_client.h"
#include "common/config.h"
#include "common/options.h"
#include "common/shard_stats.h"
#include "common/status.h"
#include "common/watched_process.h"
#include "store/split_mix.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kRequestTimeoutMs = 120000;
constexpr auto kStartTimeout = std::chrono::seconds(60);
constexpr uint32_t kWarmBatch = 4096;
constexpr size_t kIdsTable = 1;  // index of `ids` in the job

struct Config {
  uint64_t ids = 100000000;
  uint32_t shards = 4;
  uint32_t fraction = 4;
  uint32_t dim = 4;
  uint32_t batch = 16384;
  uint32_t depth = 4;
  uint64_t max_mb = 0;  // > 0: the table's bound in MiB instead of max_rows
  double time_limit_s = 1800;
  std::string bin_dir;
  std::string dir = "/tmp";
  bool quick = false;
};

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }
double MiB(double bytes) { return bytes / 1048576.0; }

// One second of the run, per shard.
struct Sample {
  double t = 0;  // seconds since the stream started
  std::vector<uint64_t> rss, stored_rows, stored_bytes, evicted_rows;
};

// Samples each server's resident memory every 100 ms and, once a second,
// its `ids` table's counts (STATS through a ControlClient used by this
// thread alone). Started by Start(), stopped and joined by Stop() or the
// destructor.
class Sampler {
 public:
  Sampler(std::vector<pid_t> pids, std::unique_ptr<ControlClient> control)
      : pids_(std::move(pids)), control_(std::move(control)), rss_(pids_.size()) {}
  ~Sampler() { Stop(); }

  void Start(SteadyClock::time_point began) {
    began_ = began;
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Read after Stop(): every 100 ms reading per shard, the lines, the
  // first STATS error.
  const std::vector<std::vector<uint64_t>>& rss() const { return rss_; }
  const std::vector<Sample>& samples() const { return samples_; }
  const Status& error() const { return error_; }

 private:
  void Loop() {
    auto next_line = began_;
    while (!stop_.load()) {
      for (size_t s = 0; s < pids_.size(); ++s) rss_[s].push_back(ResidentBytes(pids_[s]));
      const auto now = SteadyClock::now();
      if (now >= next_line) {
        next_line += std::chrono::seconds(1);
        Sample sample;
        sample.t = Seconds(now - began_);
        for (size_t s = 0; s < pids_.size(); ++s) {
          sample.rss.push_back(rss_[s].back());
          StatusOr<ShardStats> stats = control_->StructuredStats(static_cast<uint32_t>(s));
          if (!stats.ok()) {
            if (error_.ok()) error_ = stats.status();
            sample.stored_rows.push_back(0);
            sample.stored_bytes.push_back(0);
            sample.evicted_rows.push_back(0);
            continue;
          }
          sample.stored_rows.push_back(stats->tables[kIdsTable].stored_rows);
          sample.stored_bytes.push_back(stats->tables[kIdsTable].stored_bytes);
          sample.evicted_rows.push_back(stats->tables[kIdsTable].evicted_rows);
        }
        samples_.push_back(std::move(sample));
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
  }

  const std::vector<pid_t> pids_;
  std::unique_ptr<ControlClient> control_;
  SteadyClock::time_point began_;
  // Written by the thread until Stop().
  std::vector<std::vector<uint64_t>> rss_;
  std::vector<Sample> samples_;
  Status error_ = Status::Ok();
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the members above exist
};

std::string JobYaml(const Config& cfg, const std::vector<std::string>& servers,
                    uint64_t max_rows) {
  const std::string bound = cfg.max_mb > 0 ? "max_mb: " + std::to_string(cfg.max_mb)
                                           : "max_rows: " + std::to_string(max_rows);
  std::string list;
  for (const std::string& s : servers) list += (list.empty() ? "\"" : ", \"") + s + "\"";
  const std::string dim = std::to_string(cfg.dim);
  return "cluster: { servers: [" + list + "], workers: 1 }\n"
         "tables:\n"
         "  - { name: warm, keys: hashed, dim: " + dim +
         ", max_rows: 8192, evict: { policy: lru } }\n"
         "  - { name: ids, keys: hashed, dim: " + dim + ", " + bound + ", init: { type: uniform, scale: 0.01 }, optimizer: { type: adagrad, lr: 0.05 }, "
         "evict: { policy: lru } }\n"
         "consistency: { mode: asp }\n"
         "server: { exit_when_workers_leave: false }\n"
         "client: { request_timeout_ms: " + std::to_string(kRequestTimeoutMs) + " }\n"
         "liveness: { server_down_timeout_ms: " + std::to_string(kRequestTimeoutMs) + " }\n";
}

Status Run(const Config& cfg) {
  PS_ASSIGN_OR_RETURN(const std::string server_bin, ExecutableIn(cfg.bin_dir, "ps_server"));
  // With --max-mb, the rows that bound pays for (HashedRows::RowsWithin),
  // as the shard reports them.
  uint64_t max_rows = std::max<uint64_t>(1, cfg.ids / cfg.fraction / cfg.shards);
  std::error_code ec;
  const fs::path folder = fs::path(cfg.dir) / ("ps_hashed_bound_bench_" + std::to_string(::getpid()));
  fs::create_directories(folder, ec);
  if (ec) return InternalError("cannot create " + folder.string() + ": " + ec.message());
  ScratchDir scratch(folder);  // declared before the servers: removed after they are gone
  std::vector<std::string> servers;
  PS_RETURN_IF_ERROR(FreeReplicaPorts(cfg.shards, 1, &servers).status());
  const std::string config_path = (folder / "job.yaml").string();
  {
    std::ofstream yaml(config_path);
    yaml << JobYaml(cfg, servers, max_rows);
    if (!yaml) return InternalError("cannot write " + config_path);
  }
  PS_ASSIGN_OR_RETURN(const JobOptions job, LoadJobFile(config_path));
  const std::string load_before = LoadAverage();

  // The servers: killed and reaped by their destructors when anything below fails.
  std::vector<std::unique_ptr<WatchedProcess>> procs;
  for (uint32_t s = 0; s < cfg.shards; ++s) {
    PS_ASSIGN_OR_RETURN(
        std::unique_ptr<WatchedProcess> p,
        WatchedProcess::Start({.argv = {server_bin, "--config", config_path, "--shard",
                                        std::to_string(s)},
                               .env = {}}));
    procs.push_back(std::move(p));
  }
  std::vector<pid_t> pids;
  for (auto& p : procs) {
    PS_RETURN_IF_ERROR(p->WaitForLine("serving", kStartTimeout).status());
    pids.push_back(p->pid());
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(job, 0));
  PS_RETURN_IF_ERROR(client->Join());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ControlClient> control, ControlClient::Create(job));

  // Fixed costs: the processes' buffers warmed by pushes and pulls of the
  // same size into the small table.
  {
    std::vector<uint64_t> ids(kWarmBatch);
    std::vector<float> pulled(size_t{kWarmBatch} * cfg.dim);
    const auto grads = std::make_shared<const std::vector<float>>(size_t{kWarmBatch} * cfg.dim, 0.01f);
    uint64_t next = uint64_t{1} << 62;
    for (int i = 0; i < 40; ++i) {
      for (uint64_t& id : ids) id = SplitMix(next++);
      PS_RETURN_IF_ERROR(client->PushSync(0, ids, SharedFloats::Of(grads)));
      for (uint64_t& id : ids) id = SplitMix(next++);
      PS_RETURN_IF_ERROR(client->PullSync(0, ids, pulled.data()));
    }
  }
  std::vector<uint64_t> fixed(cfg.shards, 0);
  for (int i = 0; i < 20; ++i) {
    for (uint32_t s = 0; s < cfg.shards; ++s) fixed[s] = std::max(fixed[s], ResidentBytes(pids[s]));
    std::this_thread::sleep_for(milliseconds(10));
  }
  PS_ASSIGN_OR_RETURN(ShardStats first_stats, control->StructuredStats(0));
  if (first_stats.tables.size() <= kIdsTable) {
    return InternalError("shard 0 does not report the ids table");
  }
  if (cfg.max_mb > 0) max_rows = first_stats.tables[kIdsTable].max_rows;
  if (first_stats.tables[kIdsTable].max_rows != max_rows) {
    return InternalError("shard 0 reports max_rows " +
                         std::to_string(first_stats.tables[kIdsTable].max_rows) + ", not " +
                         std::to_string(max_rows));
  }

  // The stream.
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ControlClient> sampler_control, ControlClient::Create(job));
  const uint64_t batches = (cfg.ids + cfg.batch - 1) / cfg.batch;
  const auto grads = std::make_shared<const std::vector<float>>(size_t{cfg.batch} * cfg.dim, 0.01f);
  // Ids of the pushes in flight: a buffer each, not reused until its push completed.
  std::vector<std::vector<uint64_t>> id_buffers(cfg.depth + 1, std::vector<uint64_t>(cfg.batch));
  std::deque<Ticket> in_flight;
  Sampler sampler(pids, std::move(sampler_control));
  std::fprintf(stderr,
               "hashed_bound_bench: %u shards, %" PRIu64 " ids in pushes of %u, max_rows %" PRIu64
               " a shard ...\n",
               cfg.shards, cfg.ids, cfg.batch, max_rows);
  const auto began = SteadyClock::now();
  sampler.Start(began);
  uint64_t pushed = 0;
  bool cut_short = false;
  // When the stream had sent as many ids as the shards hold: the tables
  // are about full and each push evicts from then on.
  double full_s = -1;
  for (uint64_t b = 0; b < batches; ++b) {
    if (Seconds(SteadyClock::now() - began) > cfg.time_limit_s) {
      cut_short = true;
      break;
    }
    if (in_flight.size() >= cfg.depth) {
      PS_RETURN_IF_ERROR(client->Wait(in_flight.front()));
      in_flight.pop_front();
    }
    std::vector<uint64_t>& ids = id_buffers[b % id_buffers.size()];
    const size_t n = static_cast<size_t>(std::min<uint64_t>(cfg.batch, cfg.ids - pushed));
    ids.resize(n);
    for (size_t i = 0; i < n; ++i) ids[i] = SplitMix(pushed + i);
    PS_ASSIGN_OR_RETURN(Ticket t,
                        client->Push(kIdsTable, ids,
                                     SharedFloats::Of(grads).Slice(0, n * cfg.dim)));
    in_flight.push_back(t);
    pushed += n;
    if (full_s < 0 && pushed >= max_rows * cfg.shards) full_s = Seconds(SteadyClock::now() - began);
    if (b % 1024 == 1023) {
      std::fprintf(stderr, "hashed_bound_bench: %" PRIu64 " ids pushed, %.0f s\n", pushed,
                   Seconds(SteadyClock::now() - began));
    }
  }
  PS_RETURN_IF_ERROR(client->WaitAll());
  const double stream_s = Seconds(SteadyClock::now() - began);
  // A last second of samples after the stream, then the final counts.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  sampler.Stop();
  PS_RETURN_IF_ERROR(sampler.error());
  std::vector<ShardStats> last;
  for (uint32_t s = 0; s < cfg.shards; ++s) {
    PS_ASSIGN_OR_RETURN(ShardStats st, control->StructuredStats(s));
    last.push_back(std::move(st));
  }
  PS_RETURN_IF_ERROR(client->Leave());
  const double total_s = Seconds(SteadyClock::now() - began);
  if (Status down = control->ShutdownServers(); down.ok()) {
    for (auto& p : procs) p->WaitFor(milliseconds(30000)).status().IgnoreError();
  }
  procs.clear();

  // Per shard: the bound, the samples against it, the evictions.
  struct Shard {
    uint64_t fixed = 0, peak = 0, end_rss = 0, bound = 0, counted_peak = 0, stored = 0;
    uint64_t evicted = 0, dropped = 0;
    uint64_t samples_above = 0, samples = 0;
    double evict_s = 0;
  };
  std::vector<Shard> shards(cfg.shards);
  const std::vector<Sample>& samples = sampler.samples();
  bool within = true;
  for (uint32_t s = 0; s < cfg.shards; ++s) {
    Shard& sh = shards[s];
    const ShardStats::Table& t = last[s].tables[kIdsTable];
    sh.fixed = fixed[s];
    sh.bound = cfg.max_mb > 0 ? cfg.max_mb << 20 : t.stored_bytes;
    sh.stored = t.stored_rows;
    sh.evicted = t.evicted_rows;
    sh.dropped = t.dropped_rows;
    const uint64_t limit = sh.fixed + sh.bound + sh.bound / 10;
    for (uint64_t rss : sampler.rss()[s]) {
      sh.peak = std::max(sh.peak, rss);
      ++sh.samples;
      if (rss > limit) ++sh.samples_above;
    }
    sh.end_rss = sampler.rss()[s].empty() ? 0 : sampler.rss()[s].back();
    for (const Sample& x : samples) sh.counted_peak = std::max(sh.counted_peak, x.stored_bytes[s]);
    if (sh.peak > limit) within = false;
    sh.evict_s = full_s >= 0 ? stream_s - full_s : 0;
  }
  auto above_fixed = [](uint64_t rss, const Shard& sh, uint64_t bytes) {
    return static_cast<double>(rss - std::min(rss, sh.fixed)) /
           static_cast<double>(std::max<uint64_t>(1, bytes));
  };

  const std::string bound_text =
      cfg.max_mb > 0 ? "max_mb " + std::to_string(cfg.max_mb) + " a shard (max_rows " +
                           std::to_string(max_rows) + ")"
                     : "max_rows " + std::to_string(max_rows) + " a shard";
  std::printf("# hashed_bound_bench: %" PRIu64 " distinct ids over %u shards, bound 1/%u of them\n\n",
              pushed, cfg.shards, cfg.fraction);
  std::printf(
      "%u hardware threads, CPU %s; load %s before, %s after. Table `ids`: dim %u, adagrad, "
      "evict lru, %s; pushes of %u ids, %u in flight, one worker. "
      "Stream %.1f s (%s; the shards' rows sent by %.1f s), %.2f M ids/s pushed; run %.1f s "
      "with the last second of samples.\n\n",
      std::thread::hardware_concurrency(), CpuModel().c_str(), load_before.c_str(),
      LoadAverage().c_str(), cfg.dim, bound_text.c_str(), cfg.batch, cfg.depth, stream_s,
      cut_short ? "CUT SHORT by --time-limit" : "every id pushed", full_s,
      static_cast<double>(pushed) / stream_s / 1e6, total_s);
  std::printf(
      "bound = %s; counted peak = the most "
      "bytes its STATS reported during the run (sampled each second); RSS sampled every 100 "
      "ms; \"above\" = (RSS - fixed) / bytes.\n\n",
      cfg.max_mb > 0 ? "max_mb" : "the table's bytes at the end (full: max_rows rows)");
  std::printf(
      "| shard | fixed MiB | bound MiB (rows) | counted peak MiB | peak RSS MiB | peak above / "
      "bound | peak above / counted peak | RSS at the end MiB | end above / bound | samples "
      "above fixed + 1.1 bound | rows evicted | evictions/s at the bound |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (uint32_t s = 0; s < cfg.shards; ++s) {
    const Shard& sh = shards[s];
    std::printf("| %u | %.0f | %.0f (%" PRIu64 ") | %.0f | %.0f | %.3f | %.3f | %.0f | %.3f | "
                "%" PRIu64 " of %" PRIu64 " | %" PRIu64 " | %.0f |\n",
                s, MiB(sh.fixed), MiB(sh.bound), sh.stored, MiB(sh.counted_peak), MiB(sh.peak),
                above_fixed(sh.peak, sh, sh.bound), above_fixed(sh.peak, sh, sh.counted_peak),
                MiB(sh.end_rss), above_fixed(sh.end_rss, sh, sh.bound), sh.samples_above,
                sh.samples, sh.evicted,
                sh.evict_s > 0 ? static_cast<double>(sh.evicted) / sh.evict_s : 0.0);
  }
  uint64_t evicted = 0, dropped = 0;
  for (const Shard& sh : shards) {
    evicted += sh.evicted;
    dropped += sh.dropped;
  }
  std::printf("\nAll shards: %" PRIu64 " rows evicted, %.0f evictions/s over the stream; %" PRIu64
              " rows dropped. Peak RSS within fixed + 1.1 x the bound on every shard: %s.\n",
              evicted, static_cast<double>(evicted) / stream_s, dropped, within ? "yes" : "NO");
  std::printf("\nPer second (sum over shards): t s | RSS MiB | counted MiB | rows held | rows "
              "evicted\n");
  const size_t step = std::max<size_t>(1, samples.size() / 30);
  for (size_t i = 0; i < samples.size(); i += step) {
    const Sample& x = samples[i];
    uint64_t rss = 0, counted = 0, stored = 0, ev = 0;
    for (uint32_t s = 0; s < cfg.shards; ++s) {
      rss += x.rss[s];
      counted += x.stored_bytes[s];
      stored += x.stored_rows[s];
      ev += x.evicted_rows[s];
    }
    std::printf("  %6.1f | %7.0f | %7.0f | %10" PRIu64 " | %10" PRIu64 "\n", x.t,
                MiB(static_cast<double>(rss)), MiB(static_cast<double>(counted)), stored, ev);
  }

  for (const Shard& sh : shards) {
    if (sh.stored > max_rows) return InternalError("a shard holds more rows than max_rows");
    if (sh.dropped != 0) return InternalError("a shard dropped rows; evict lru should make room");
    if (!cut_short && sh.evicted == 0) return InternalError("a shard never evicted");
  }
  return Status::Ok();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  ps::Config cfg;
  CLI::App app{"hashed_bound_bench: a hashed table's memory bound with real shards over a long "
               "stream of new ids"};
  app.add_option("--ids", cfg.ids, "distinct ids pushed")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_option("--shards", cfg.shards, "ps_server processes")->check(CLI::Range(1u, 64u));
  app.add_option("--fraction", cfg.fraction,
                 "the shards together hold ids / fraction rows (max_rows = ids / fraction / shards)")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--max-mb", cfg.max_mb,
                 "bound each shard's table by max_mb (MiB) instead of max_rows; the report's "
                 "bound is then max_mb")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  app.add_option("--dim", cfg.dim, "floats per row")->check(CLI::Range(1u, 4096u));
  app.add_option("--batch", cfg.batch, "ids per push")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--depth", cfg.depth, "pushes in flight")->check(CLI::Range(1u, 64u));
  app.add_option("--time-limit", cfg.time_limit_s, "seconds after which the stream stops")
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--bin-dir", cfg.bin_dir, "where ps_server is (default: next to this binary)");
  app.add_option("--dir", cfg.dir, "parent of the job's scratch folder");
  app.add_flag("--quick", cfg.quick, "a small run for ctest: 10^6 ids in pushes of 4,096");
  CLI11_PARSE(app, argc, argv);
  if (cfg.quick) {
    cfg.ids = 1000000;
    cfg.batch = 4096;
    cfg.time_limit_s = std::min(cfg.time_limit_s, 60.0);
  }
  ps::Status s = ps::Run(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "hashed_bound_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
