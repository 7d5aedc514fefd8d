// reshard_bench: what a job resumed on another number of servers costs at
// restore (RestoreGeneration, server/restore.h): each new shard's restore
// of a checkpoint written by --from shards onto --to shards, against the
// same checkpoint restored onto --from shards (each its own generation,
// read whole), in the same run.
//
// Workload: a job of two tables with all their state: "emb", a range table
// of --floats floats (default 90M) of --dim (default 16) under adam
// (values + 2 slots: 1.08 GB), and "ids", a hashed table of --ids ids
// (default 1M) of dim 16 under adagrad (values + 1 slot: 128 MB) and 4096
// hash slots; 1.21 GB of state at the defaults. Its generation of clock 1
// is written by --from shards (default 2): each a store filled with
// arbitrary bit patterns (NaNs included; the ids spread over the uint64
// space, each on the shard of its hash slot), written with
// CheckpointDir::Write (sync), under --dir (default the temporary folder)
// in a folder of the benchmark's own, removed at the end.
//
// Each repetition (--reps, default 3), for each target count in --to
// (default 2,3; the one equal to --from is the baseline), for each new
// shard j, one at a time (a server on a host of its own):
//   cold          page cache dropped (root; else "n/a", or --no-cold), then
//                 ShardStore::CreateUnwritten, as a server about to restore
//                 makes its store (timed: "create") and
//                 RestoreGeneration of the generation into it (timed:
//                 "restore"): with --from shards its own generation read
//                 whole; with another count its rows of every old shard's
//                 generation (a seek to its first run or hash slot in each
//                 old shard that holds any, the records in key order)
//   warm          the same again, the generation's files now cached
//   in memory     AssembleStore from the --from shards' stores (kept in
//                 memory) whose rows overlap the new shard's: what a server
//                 of the next map that followed them does at a reshard's
//                 handover (server/reshard_follower.h), unwritten store
//                 created and filled (timed)
// then the store is checked and freed. MB read: the records' bytes a new
// shard read (RestoreResult::bytes_read; the whole generation's state for
// the baseline). The job's restore: its slowest shard (each on its own
// host, in parallel); reported per target with the ratio to the baseline's.
//
// Check: every value and optimizer state element of every restored shard
// equals the pattern written, bit for bit, and each shard holds exactly the
// ids of its hash slots; a mismatch or any error prints it and exits 1
// before any number is printed. Times are medians over repetitions. MB =
// 10^6 bytes. --quick (1M floats, 20,000 ids, --to 1,2,3, 1 repetition, no
// cache dropping) is the ctest smoke test; its numbers mean nothing.

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchmarks/machine.h"
#include "common/hash_slots.h"
#include "common/reshard_sources.h"
#include "common/options.h"
#include "common/status.h"
#include "server/checkpoint.h"
#include "server/checkpoint_layout.h"
#include "server/reshard_follower.h"
#include "server/restore.h"
#include "store/shard_store.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kClock = 1;
constexpr uint32_t kIdDim = 16;

struct Config {
  uint64_t floats = 90000000;
  uint32_t dim = 16;
  uint64_t ids = 1000000;
  uint32_t from = 2;
  std::vector<uint32_t> to = {2, 3};
  int reps = 3;
  bool cold = true;
  std::string dir;
};

// Element `i` of array `k` (0 values, 1.. slots) of a table, as a float.
float Pattern(uint64_t i, uint64_t k) {
  const uint32_t b = PatternBits(i, k);
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Id number n of the hashed table, spread over the uint64 space.
uint64_t Id(uint64_t n) { return n * 0x9e3779b97f4a7c15ull + 0x1234567; }
// Element index of column c of id `id` for Pattern (array k added there).
uint64_t IdElement(uint64_t id, uint32_t c) { return (id ^ 0x5bd1e995ull) * kIdDim + c; }

JobOptions Job(const Config& cfg, uint32_t servers, const std::string& dir) {
  JobOptions job;
  for (uint32_t s = 0; s < servers; ++s) job.cluster.servers.push_back("127.0.0.1:" + std::to_string(7000 + s));
  job.cluster.workers = 1;
  TableOptions emb;
  emb.name = "emb";
  emb.rows = cfg.floats / cfg.dim;
  emb.dim = cfg.dim;
  emb.optimizer.kind = OptimizerKind::kAdam;
  job.tables.push_back(emb);
  if (cfg.ids > 0) {
    TableOptions ids;
    ids.name = "ids";
    ids.keys = KeyKind::kHashed;
    ids.dim = kIdDim;
    ids.max_rows = cfg.ids;  // room for every id on one shard
    ids.optimizer.kind = OptimizerKind::kAdagrad;
    job.tables.push_back(ids);
  }
  job.checkpoint.dir = dir;
  return job;
}

// Fills shard `shard`'s store with the patterns.
void Fill(const JobOptions& job, uint32_t shard, ShardStore* store) {
  const TableOptions& emb = job.tables[0];
  const RowRange owned = store->layouts()[0].owned;
  constexpr uint64_t kChunkRows = 65536;
  std::vector<float> arrays[3];
  for (uint64_t first = owned.begin; first < owned.end; first += kChunkRows) {
    const uint64_t n = std::min(kChunkRows, owned.end - first);
    for (uint64_t k = 0; k < 3; ++k) {
      arrays[k].resize(n * emb.dim);
      for (uint64_t i = 0; i < n * emb.dim; ++i) arrays[k][i] = Pattern(first * emb.dim + i, k);
    }
    const std::byte* slots[2] = {reinterpret_cast<const std::byte*>(arrays[1].data()),
                                 reinterpret_cast<const std::byte*>(arrays[2].data())};
    store->RestoreRows(0, first, n, reinterpret_cast<const std::byte*>(arrays[0].data()), slots);
  }
  if (job.tables.size() < 2) return;
  const TableOptions& ids = job.tables[1];
  const auto servers = static_cast<uint32_t>(job.cluster.servers.size());
  float row[2][kIdDim];
  for (uint64_t n = 0; n < ids.max_rows; ++n) {
    const uint64_t id = Id(n);
    const uint32_t slot = IdSlot(id, ids.HashSeed(), ids.HashSlots());
    if (SlotShard(slot, ids.HashSlots(), servers) != shard) continue;
    for (uint32_t k = 0; k < 2; ++k) {
      for (uint32_t c = 0; c < kIdDim; ++c) row[k][c] = Pattern(IdElement(id, c), k);
    }
    const std::byte* slots[1] = {reinterpret_cast<const std::byte*>(row[1])};
    store->RestoreRows(1, id, 1, reinterpret_cast<const std::byte*>(row[0]), slots);
  }
}

// OK when `store` (shard `shard` of `job`) holds exactly the patterns.
Status Check(const JobOptions& job, uint32_t shard, const ShardStore& store) {
  const std::string what = "shard " + std::to_string(shard) + " of " +
                           std::to_string(job.cluster.servers.size());
  const uint32_t dim = job.tables[0].dim;
  const RowRange owned = store.layouts()[0].owned;
  for (uint32_t k = 0; k < 3; ++k) {
    const std::vector<float> got = k == 0 ? store.CopyValues(0) : store.CopySlot(0, k - 1);
    for (size_t i = 0; i < got.size(); ++i) {
      const uint32_t want = PatternBits(owned.begin * dim + i, k);
      if (std::memcmp(&got[i], &want, sizeof want) != 0) {
        return DataLossError(what + ": table 'emb' array " + std::to_string(k) + " element " +
                             std::to_string(owned.begin * dim + i) + " differs");
      }
    }
  }
  if (job.tables.size() < 2) return Status::Ok();
  PS_ASSIGN_OR_RETURN(const ShardSnapshot snapshot, store.Snapshot(job, shard, kClock));
  const TableSnapshot& ids = snapshot.tables[1];
  const TableOptions& table = job.tables[1];
  uint64_t expected = 0;
  const auto servers = static_cast<uint32_t>(job.cluster.servers.size());
  for (uint64_t n = 0; n < table.max_rows; ++n) {
    const uint32_t slot = IdSlot(Id(n), table.HashSeed(), table.HashSlots());
    if (SlotShard(slot, table.HashSlots(), servers) == shard) ++expected;
  }
  if (ids.ids.size() != expected) {
    return DataLossError(what + ": table 'ids' holds " + std::to_string(ids.ids.size()) +
                         " ids, not " + std::to_string(expected));
  }
  for (size_t r = 0; r < ids.ids.size(); ++r) {
    for (uint32_t c = 0; c < kIdDim; ++c) {
      const uint32_t v = PatternBits(IdElement(ids.ids[r], c), 0);
      const uint32_t s = PatternBits(IdElement(ids.ids[r], c), 1);
      if (std::memcmp(&ids.values[r * kIdDim + c], &v, 4) != 0 ||
          std::memcmp(&ids.slots[0][r * kIdDim + c], &s, 4) != 0) {
        return DataLossError(what + ": table 'ids' id " + std::to_string(ids.ids[r]) + " differs");
      }
    }
  }
  return Status::Ok();
}

// Bytes of state (values and slots) a store holds.
uint64_t StateBytes(const JobOptions& job, const ShardStore& store) {
  uint64_t bytes = store.layouts()[0].owned.size() * job.tables[0].dim * 4 * 3;
  if (job.tables.size() > 1) bytes += store.stored_rows(1) * kIdDim * 4 * 2;
  return bytes;
}

// One new shard's figures: medians over repetitions.
struct ShardFigures {
  uint64_t state = 0, read = 0;
  std::vector<double> create_cold, restore_cold, create_warm, restore_warm;
  // In memory: the store built from the old shards' stores (AssembleStore,
  // what a server of the next map that followed them does at the handover).
  std::vector<double> assemble;
};

Status RunAll(const Config& cfg) {
  const auto began = std::chrono::steady_clock::now();
  const fs::path parent = cfg.dir.empty() ? fs::temp_directory_path() : fs::path(cfg.dir);
  const fs::path dir = parent / ("reshard_bench_" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (cfg.floats / cfg.dim == 0) return InvalidArgumentError("--floats is below --dim");
  if (cfg.cold) PS_RETURN_IF_ERROR(DropCaches("--no-cold"));

  // The generation of --from shards.
  const JobOptions written = Job(cfg, cfg.from, dir.string());
  PS_RETURN_IF_ERROR(written.Validate());
  uint64_t model_bytes = 0;
  std::vector<std::unique_ptr<ShardStore>> old_stores;  // kept for the in-memory builds
  for (uint32_t s = 0; s < cfg.from; ++s) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::Create(written, s, false));
    Fill(written, s, store.get());
    model_bytes += StateBytes(written, *store);
    PS_ASSIGN_OR_RETURN(const ShardSnapshot snapshot, store->Snapshot(written, s, kClock));
    old_stores.push_back(std::move(store));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointDir> folder,
                        CheckpointDir::Open(ShardCheckpointDir(dir.string(), s)));
    PS_RETURN_IF_ERROR(folder->Write(snapshot, CheckpointWriteOptions{}));
  }

  std::map<uint32_t, std::vector<ShardFigures>> figures;  // by target count
  Status status = Status::Ok();
  OsFilesystem files;
  for (int rep = 0; rep < cfg.reps && status.ok(); ++rep) {
    for (const uint32_t to : cfg.to) {
      const JobOptions job = Job(cfg, to, dir.string());
      std::vector<ShardFigures>& mine = figures[to];
      mine.resize(to);
      for (uint32_t j = 0; j < to && status.ok(); ++j) {
        status = [&]() -> Status {
          PS_ASSIGN_OR_RETURN(const RestorePoint point, ShardRestorePoint(files, job, j, -1));
          if (point.clock != kClock || point.writers != cfg.from) {
            return InternalError("shard " + std::to_string(j) + " would restore clock " +
                                 std::to_string(point.clock) + " of " +
                                 std::to_string(point.writers) + " shards");
          }
          for (const bool cold : {true, false}) {
            if (cold && !cfg.cold) continue;
            if (cold) PS_RETURN_IF_ERROR(DropCaches("--no-cold"));
            std::unique_ptr<ShardStore> store;
            Status created = Status::Ok();
            const double create = Time([&] {
              auto made = ShardStore::CreateUnwritten(job, j);
              if (made.ok()) store = std::move(*made);
              created = made.status();
            });
            PS_RETURN_IF_ERROR(created);
            StatusOr<RestoreResult> result = InternalError("not run");
            const double restore =
                Time([&] { result = RestoreGeneration(job, j, point, store.get(), &files); });
            PS_RETURN_IF_ERROR(result.status());
            PS_RETURN_IF_ERROR(Check(job, j, *store));
            ShardFigures& f = mine[j];
            f.state = StateBytes(job, *store);
            f.read = result->bytes_read != 0 ? result->bytes_read : f.state;
            (cold ? f.create_cold : f.create_warm).push_back(create);
            (cold ? f.restore_cold : f.restore_warm).push_back(restore);
          }
          // In memory, from the old shards' stores whose rows overlap.
          std::vector<ShardStore*> old;
          for (uint32_t i : FollowedShards(written, job, j)) old.push_back(old_stores[i].get());
          StatusOr<std::unique_ptr<ShardStore>> built = InternalError("not run");
          const double assemble = Time([&] { built = AssembleStore(job, j, old); });
          PS_RETURN_IF_ERROR(built.status());
          PS_RETURN_IF_ERROR(Check(job, j, **built));
          mine[j].assemble.push_back(assemble);
          return Status::Ok();
        }();
      }
    }
  }
  fs::remove_all(dir, ec);
  PS_RETURN_IF_ERROR(status);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();

  std::printf("# reshard_bench: restore onto another shard count against onto the same\n\n");
  std::printf(
      "%u hardware threads, CPU %s. Model: table 'emb' of %" PRIu64
      " floats (dim %u, adam: values + 2 slots) and table 'ids' of %" PRIu64
      " ids (dim %u, adagrad: values + 1 slot), %.0f MB of state, written by %u shards; files "
      "under %s; %d repetition(s); %.0f s in all. Each new shard restores alone (a server on "
      "a host of its own); times are medians; MB = 10^6 bytes.\n\n",
      std::thread::hardware_concurrency(), CpuModel().c_str(), cfg.floats, cfg.dim, cfg.ids,
      kIdDim, static_cast<double>(model_bytes) / 1e6, cfg.from, parent.c_str(), cfg.reps, total);
  std::printf(
      "| shards | new shard | state MB | MB read | cold: create s | restore s | MB/s | warm: "
      "create s | restore s | MB/s | in memory s |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const auto cell = [](const std::vector<double>& v, uint64_t bytes, bool rate) {
    if (v.empty()) return std::string("n/a");
    char buf[32];
    if (rate) {
      std::snprintf(buf, sizeof buf, "%.0f", static_cast<double>(bytes) / 1e6 / Median(v));
    } else {
      std::snprintf(buf, sizeof buf, "%.2f", Median(v));
    }
    return std::string(buf);
  };
  std::map<uint32_t, std::array<double, 3>> slowest;  // cold, warm, in memory
  for (const auto& [to, shards] : figures) {
    for (uint32_t j = 0; j < shards.size(); ++j) {
      const ShardFigures& f = shards[j];
      std::printf("| %u -> %u | %u | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s |\n", cfg.from,
                  to, j, static_cast<double>(f.state) / 1e6, static_cast<double>(f.read) / 1e6,
                  cell(f.create_cold, 0, false).c_str(), cell(f.restore_cold, 0, false).c_str(),
                  cell(f.restore_cold, f.state, true).c_str(),
                  cell(f.create_warm, 0, false).c_str(), cell(f.restore_warm, 0, false).c_str(),
                  cell(f.restore_warm, f.state, true).c_str(), cell(f.assemble, 0, false).c_str());
      const double cold = f.restore_cold.empty() ? 0 : Median(f.create_cold) + Median(f.restore_cold);
      const double warm = Median(f.create_warm) + Median(f.restore_warm);
      slowest[to][0] = std::max(slowest[to][0], cold);
      slowest[to][1] = std::max(slowest[to][1], warm);
      slowest[to][2] = std::max(slowest[to][2], Median(f.assemble));
    }
  }
  const auto base = slowest.find(cfg.from);
  std::printf(
      "\nThe job's restore (create + restore of its slowest shard, the servers in parallel), "
      "and its ratio to %u -> %u's:\n\n",
      cfg.from, cfg.from);
  std::printf("| shards | cold s | / same count | warm s | / same count | in memory s |\n"
              "|---|---:|---:|---:|---:|---:|\n");
  for (const auto& [to, s] : slowest) {
    const auto ratio = [&](double x, double b) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", x / b);
      return base == slowest.end() || b == 0 || x == 0 ? std::string("n/a") : std::string(buf);
    };
    const auto secs = [](double x) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", x);
      return x == 0 ? std::string("n/a") : std::string(buf);
    };
    std::printf("| %u -> %u | %s | %s | %s | %s | %s |\n", cfg.from, to, secs(s[0]).c_str(),
                ratio(s[0], base == slowest.end() ? 0 : base->second[0]).c_str(),
                secs(s[1]).c_str(), ratio(s[1], base == slowest.end() ? 0 : base->second[1]).c_str(),
                secs(s[2]).c_str());
  }
  std::printf("\nEvery restored and every in-memory shard matched the model written, bit for "
              "bit.\n");
  return Status::Ok();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  CLI::App app{"Restore of a checkpoint onto another shard count against onto the same"};
  bool quick = false;
  ps::Config cfg;
  app.add_flag("--quick", quick,
               "Smoke test: 1M floats, 20,000 ids, --to 1,2,3, 1 repetition, no cache dropping "
               "(unless given)");
  app.add_option("--floats", cfg.floats, "Floats of table 'emb' (values; each slot the same)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34));
  app.add_option("--dim", cfg.dim, "Dim of table 'emb'")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--ids", cfg.ids, "Ids of the hashed table 'ids' (0: no hashed table)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30));
  app.add_option("--from", cfg.from, "Shards that write the checkpoint")
      ->check(CLI::Range(1u, 64u));
  app.add_option("--to", cfg.to, "Shard counts to restore onto (--from is the baseline)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 64u));
  app.add_option("--reps", cfg.reps, "Repetitions (the median is reported)")
      ->check(CLI::Range(1, 100));
  app.add_flag("--cold,!--no-cold", cfg.cold,
               "Drop the page cache before each cold restore (needs root; default on)");
  app.add_option("--dir", cfg.dir,
                 "Folder to create the benchmark's files in (default: the temporary folder); "
                 "removed afterwards");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    if (app.count("--floats") == 0) cfg.floats = 1000000;
    if (app.count("--ids") == 0) cfg.ids = 20000;
    if (app.count("--to") == 0) cfg.to = {1, 2, 3};
    if (app.count("--reps") == 0) cfg.reps = 1;
    if (app.count("--cold") == 0 && app.count("--no-cold") == 0) cfg.cold = false;
  }
  ps::Status s = ps::RunAll(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "reshard_bench: FAILED: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
