// incremental_bench: bytes written per checkpoint generation, full
// generations (checkpoint.full_every: 1) against incremental ones
// (full_every: --full-every, default 10), for workloads that touch a small
// share of their rows between generations; and what reading the newest
// generation costs then (a full one, or a full one and the deltas after it).
//
// Workloads (one shard each, a fresh store per run):
//   sparse_lr/freq   a sparse logistic regression's weights: a range table
//                    of --features rows (default 2^23) of dim 1 under
//                    adagrad (64 MB of values and state). Features are
//                    drawn by a power law over their rank (rank =
//                    floor(N * u^3), u uniform: the most frequent features
//                    are the most often drawn), and a feature's row is its
//                    rank (a feature dictionary numbered by frequency).
//   sparse_lr/hash   the same draws, a feature's row a fixed random
//                    permutation of its rank (features hashed to rows).
//   ctr              hashed embeddings: --ids rows (default 2^19) of dim 16
//                    under adagrad (128 bytes a row), evicting the least
//                    recently pushed row at that bound, filled first with
//                    the ids of ranks 0 .. ids - 1; then 9 in 10 ids pushed
//                    are drawn by the same power law over those ranks (an
//                    id evicted meanwhile is made again) and 1 in 10 are
//                    ids never seen (each new row evicts one).
// Each workload runs at each of --fractions (default 0.01 and 0.1): before
// each generation the job pushes rows until that share of its rows
// (distinct) got an update (a sparse push of up to 65536 rows at a time,
// gradient 0.01), then the shard's CheckpointTrigger writes a generation
// (every_clocks 1, sync false, keep 3), --generations (default 12) in all,
// after one pass that pushed every row once. "bytes/gen" is the size of
// each generation's folder (its files) once written, the median over the
// generations after the first, and "mean" their mean (the periodic full
// ones included): what a job writes per generation in the long run.
// "longest pause" is the longest any generation's snapshot stopped the
// loop (CheckpointTrigger::last_pause_ms): a full one shares the store's
// memory, a delta shares the blocks it writes whole and the hashed rows
// and copies only its patched rows.
// "read" is RestoreGeneration of the last generation into a new store
// (page cache warm), median of 3; its result must equal the written
// store's checksums, or the run fails (exit 1). The files go to --dir
// (default: a folder under /tmp), removed at the end.
//
// --quick (2^18 features, 2^14 ids, 4 generations) is the ctest smoke
// test; its numbers mean nothing.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/clock.h"
#include "common/options.h"
#include "common/status.h"
#include "server/checkpoint.h"
#include "server/checkpoint_layout.h"
#include "server/checkpoint_trigger.h"
#include "server/restore.h"
#include "store/shard_store.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

struct Config {
  uint64_t features = uint64_t{1} << 23;
  uint64_t ids = uint64_t{1} << 19;
  std::vector<double> fractions = {0.01, 0.1};
  uint32_t full_every = 10;
  int generations = 12;
  std::string dir;
};

enum class Workload { kLrFreq, kLrHash, kCtr };
const char* Name(Workload w) {
  switch (w) {
    case Workload::kLrFreq:
      return "sparse_lr/freq";
    case Workload::kLrHash:
      return "sparse_lr/hash";
    case Workload::kCtr:
      return "ctr";
  }
  return "?";
}

JobOptions Job(const Config& cfg, Workload w, uint32_t full_every, const std::string& dir) {
  JobOptions job;
  job.cluster.servers = {"127.0.0.1:7000"};
  job.cluster.workers = 1;
  TableOptions t;
  t.optimizer.kind = OptimizerKind::kAdagrad;
  if (w == Workload::kCtr) {
    t.name = "emb";
    t.keys = KeyKind::kHashed;
    t.dim = 16;
    t.max_rows = cfg.ids;
    t.evict.policy = EvictPolicy::kLru;
  } else {
    t.name = "weights";
    t.rows = cfg.features;
    t.dim = 1;
  }
  job.tables.push_back(t);
  job.checkpoint.dir = dir;
  job.checkpoint.every_clocks = 1;
  job.checkpoint.keep = 3;
  job.checkpoint.sync = false;
  job.checkpoint.full_every = full_every;
  return job;
}

uint64_t Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Pushes to `store` until `distinct` rows (of `n`) got an update this
// interval: the keys of rank-drawn rows, as the workload places them.
// `next_new` numbers the ctr workload's new ids.
Status Interval(ShardStore* store, Workload w, uint64_t n, uint64_t distinct, int64_t clock,
                std::mt19937_64& rng, uint64_t* next_new) {
  std::vector<bool> seen(n, false);
  std::vector<uint64_t> keys;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const uint32_t dim = w == Workload::kCtr ? 16 : 1;
  std::vector<float> grads;
  const auto flush = [&]() -> Status {
    if (keys.empty()) return Status::Ok();
    std::sort(keys.begin(), keys.end());
    grads.assign(keys.size() * dim, 0.01f);
    Request r;
    r.header.op = Op::kPush;
    r.header.table = 0;
    r.header.count = keys.size();
    r.header.dim = dim;
    r.keys = keys;
    r.values = grads;
    Status s = store->ApplyPush(r, clock);
    keys.clear();
    return s;
  };
  for (uint64_t got = 0; got < distinct;) {
    const auto rank = static_cast<uint64_t>(static_cast<double>(n) * std::pow(unit(rng), 3.0));
    if (rank >= n || seen[rank]) continue;
    seen[rank] = true;
    ++got;
    switch (w) {
      case Workload::kLrFreq:
        keys.push_back(rank);
        break;
      case Workload::kLrHash:
        // n is a power of two: an odd multiplier permutes [0, n).
        keys.push_back((rank * 0x9e3779b97f4a7c15ull) & (n - 1));
        break;
      case Workload::kCtr:
        // A held id (of rank `rank` among the ids pushed so far), or a new one.
        keys.push_back(got % 10 == 0 ? Mix((*next_new)++) : Mix(rank % *next_new));
        break;
    }
    if (keys.size() == 65536) PS_RETURN_IF_ERROR(flush());
  }
  return flush();
}

uint64_t FolderBytes(const std::string& path) {
  uint64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(path)) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  return bytes;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Result {
  double full_bytes = 0;
  double gen_bytes = 0;  // median after the first
  double mean_bytes = 0;  // mean after the first
  int deltas = 0;
  double read_s = 0;
  double longest_pause_ms = 0;  // the longest snapshot of the generations
};

StatusOr<Result> Run(const Config& cfg, Workload w, double fraction, uint32_t full_every) {
  const std::string dir = cfg.dir + "/run";
  fs::remove_all(dir);
  const JobOptions job = Job(cfg, w, full_every, dir);
  PS_RETURN_IF_ERROR(job.Validate());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::Create(job, 0));
  const uint64_t n = w == Workload::kCtr ? cfg.ids : cfg.features;
  std::mt19937_64 rng(42);
  uint64_t next_new = 0;
  // Every row pushed once first (the ctr table filled to its bound).
  if (w == Workload::kCtr) {
    next_new = n;
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    for (uint64_t first = 0; first < n; first += 65536) {
      keys.clear();
      for (uint64_t i = first; i < std::min(n, first + 65536); ++i) keys.push_back(Mix(i));
      grads.assign(keys.size() * 16, 0.01f);
      Request r;
      r.header.op = Op::kPush;
      r.header.count = keys.size();
      r.header.dim = 16;
      r.keys = keys;
      r.values = grads;
      PS_RETURN_IF_ERROR(store->ApplyPush(r, 0));
    }
  } else {
    PS_RETURN_IF_ERROR(Interval(store.get(), w, n, n, 0, rng, &next_new));
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointDir> ckpt,
                      CheckpointDir::Open(ShardCheckpointDir(dir, 0)));
  SteadyClock clock;
  CheckpointTriggerOptions options;
  options.every_clocks = 1;
  options.full_every = full_every;
  options.write.sync = false;
  options.write.keep = 3;
  Status written;
  Result result;
  std::vector<double> sizes;
  {
    CheckpointTrigger trigger(
        options, *ckpt,
        [&](int64_t c, const DeltaSince* since) {
          return store->CheckpointSnapshot(job, 0, c, since);
        },
        clock, [](CheckpointTrigger::Answer&) {}, /*last_clock=*/0);
    for (int g = 1; g <= cfg.generations; ++g) {
      if (g > 1) {
        PS_RETURN_IF_ERROR(Interval(store.get(), w, n,
                                    static_cast<uint64_t>(fraction * static_cast<double>(n)), g,
                                    rng, &next_new));
      }
      trigger.ClockAdvanced(g);
      result.longest_pause_ms = std::max(result.longest_pause_ms, trigger.last_pause_ms());
      trigger.Stop(g);  // the write finished: its size is final
      const double bytes = static_cast<double>(FolderBytes(ckpt->GenerationPath(g)));
      if (g == 1) {
        result.full_bytes = bytes;
      } else {
        sizes.push_back(bytes);
      }
    }
    result.deltas = static_cast<int>(trigger.deltas_started());
  }
  result.gen_bytes = Median(sizes);
  for (const double b : sizes) result.mean_bytes += b / static_cast<double>(sizes.size());
  // Read the newest generation back, and check it.
  std::vector<double> reads;
  for (int rep = 0; rep < 3; ++rep) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> restored, ShardStore::Create(job, 0, false));
    OsFilesystem files;
    const auto start = std::chrono::steady_clock::now();
    PS_RETURN_IF_ERROR(RestoreGeneration(job, 0, RestorePoint{cfg.generations, 1, ""},
                                         restored.get(), &files)
                           .status());
    reads.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (restored->Checksum(0) != store->Checksum(0)) {
      return DataLossError(std::string(Name(w)) + ": the restored generation " +
                           std::to_string(cfg.generations) + " differs from the store");
    }
  }
  result.read_s = Median(reads);
  fs::remove_all(dir);
  return result;
}

int Main(int argc, char** argv) {
  Config cfg;
  bool quick = false;
  CLI::App app("bytes written per checkpoint generation, full against incremental");
  app.add_option("--features", cfg.features, "rows of the sparse_lr table (a power of two)");
  app.add_option("--ids", cfg.ids, "rows of the ctr table");
  app.add_option("--fractions", cfg.fractions, "shares of rows touched between generations");
  app.add_option("--full-every", cfg.full_every, "checkpoint.full_every of the incremental runs");
  app.add_option("--generations", cfg.generations, "generations per run (>= 2)");
  app.add_option("--dir", cfg.dir, "folder for the checkpoints (default: under /tmp)");
  app.add_flag("--quick", quick, "a small smoke run");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    cfg.features = uint64_t{1} << 18;
    cfg.ids = uint64_t{1} << 14;
    cfg.generations = 4;
  }
  if ((cfg.features & (cfg.features - 1)) != 0 || cfg.generations < 2 || cfg.full_every < 2) {
    std::fprintf(stderr, "--features must be a power of two, --generations >= 2, "
                         "--full-every >= 2\n");
    return 2;
  }
  const bool own_dir = cfg.dir.empty();
  if (own_dir) {
    cfg.dir = (fs::temp_directory_path() / ("incremental_bench_" + std::to_string(::getpid())))
                  .string();
  }
  fs::create_directories(cfg.dir);
  std::printf("| workload | rows touched | full: MB/gen | incremental: MB/gen, median | "
              "mean | full / incremental (mean) | deltas of %d | read last: full (s) | "
              "chain (s) | longest pause: full (ms) | incremental (ms) |\n",
              cfg.generations - 1);
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failed = 0;
  for (const Workload w : {Workload::kLrFreq, Workload::kLrHash, Workload::kCtr}) {
    for (const double fraction : cfg.fractions) {
      const StatusOr<Result> full = Run(cfg, w, fraction, 1);
      const StatusOr<Result> incr = Run(cfg, w, fraction, cfg.full_every);
      if (!full.ok() || !incr.ok()) {
        std::fprintf(stderr, "%s at %.0f%%: %s\n", Name(w), fraction * 100,
                     (!full.ok() ? full.status() : incr.status()).ToString().c_str());
        ++failed;
        continue;
      }
      std::printf("| %s | %.0f%% | %.1f | %.2f | %.2f | %.1fx | %d | %.3f | %.3f | %.2f | %.2f |\n",
                  Name(w), fraction * 100, full->mean_bytes / 1e6, incr->gen_bytes / 1e6,
                  incr->mean_bytes / 1e6, full->mean_bytes / std::max(1.0, incr->mean_bytes),
                  incr->deltas, full->read_s, incr->read_s, full->longest_pause_ms,
                  incr->longest_pause_ms);
      std::fflush(stdout);
    }
  }
  if (own_dir) fs::remove_all(cfg.dir);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) { return ps::Main(argc, argv); }
