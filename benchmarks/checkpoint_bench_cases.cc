// checkpoint_bench's cases beside its main table (checkpoint_bench_cases.h).
#include "benchmarks/checkpoint_bench_cases.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/machine.h"
#include "common/wire.h"

namespace ps {

namespace fs = std::filesystem;

StatusOr<PushedWrite> WriteWhilePushing(const JobOptions& job, ShardStore& store,
                                        CheckpointDir& ckpt, int64_t clock) {
  fs::remove_all(ckpt.GenerationPath(clock));
  ::sync();
  const TableLayout& t = store.layouts()[0];
  const uint64_t rows = t.owned.size();
  PS_ASSIGN_OR_RETURN(const ShardSnapshot before, store.Snapshot(job, 0, clock));
  PS_ASSIGN_OR_RETURN(ShardSnapshot shared, store.SharedSnapshot(job, 0, clock));
  const uint64_t block_rows = shared.tables[0].shared.at(0).rows;  // the store's rows per block
  const std::vector<float> grads(block_rows * t.dim, 1e-3f);
  const uint64_t copies_before = store.copy_on_write_count();
  std::atomic<bool> done{false};
  Status written = InternalError("not written");
  PushedWrite out;
  std::thread writer([&] {
    out.write_s = Time([&] { written = ckpt.Write(std::move(shared), {.sync = true, .keep = 1}); });
    done.store(true, std::memory_order_release);
  });
  Status pushed = Status::Ok();
  std::vector<double> push_s;
  for (uint64_t first = 0; !done.load(std::memory_order_acquire) && pushed.ok();) {
    Request push;
    push.header.op = Op::kPush;
    push.header.first_row = t.owned.begin + first;
    push.header.count = std::min(block_rows, rows - first);
    push.header.dim = t.dim;
    push.header.flags = kFlagDenseRange;
    push.values = std::span<const float>(grads.data(), push.header.count * t.dim);
    push_s.push_back(Time([&] { pushed = store.ApplyPush(push, clock); }));
    first += push.header.count;
    if (first == rows) first = 0;
  }
  writer.join();
  PS_RETURN_IF_ERROR(pushed);
  PS_RETURN_IF_ERROR(written);
  out.copies = store.copy_on_write_count() - copies_before;
  out.pushes = push_s.size();
  out.median_push_s = Median(push_s);
  out.longest_push_s = push_s.empty() ? 0 : *std::max_element(push_s.begin(), push_s.end());

  PS_ASSIGN_OR_RETURN(const ShardSnapshot read, ckpt.Read(clock));
  for (size_t a = 0; a < Arrays(before).size(); ++a) {
    if (!SameBits(*Arrays(read)[a], *Arrays(before)[a])) {
      return DataLossError("the generation written during pushes differs from the state at its "
                           "clock (array " +
                           std::to_string(a) + ")");
    }
  }
  return out;
}

StatusOr<HashedRow> HashedSnapshotPause(uint64_t rows, int reps) {
  constexpr uint32_t kDim = 16;
  JobOptions job;
  job.cluster.servers = {"127.0.0.1:7000"};
  job.cluster.workers = 1;
  TableOptions t;
  t.name = "ids";
  t.keys = KeyKind::kHashed;
  t.dim = kDim;
  t.max_rows = rows;
  t.optimizer.kind = OptimizerKind::kAdagrad;
  job.tables = {t};
  PS_RETURN_IF_ERROR(job.Validate());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::Create(job, 0));
  constexpr uint64_t kChunk = 10000;
  std::vector<uint64_t> ids(kChunk);
  const std::vector<float> grads(kChunk * kDim, 0.01f);
  for (uint64_t first = 0; first < rows; first += kChunk) {
    const uint64_t n = std::min(kChunk, rows - first);
    for (uint64_t i = 0; i < n; ++i) ids[i] = (first + i + 1) * 0x9e3779b97f4a7c15ull;
    Request push;
    push.header.op = Op::kPush;
    push.header.count = n;
    push.header.dim = kDim;
    push.keys = std::span<const uint64_t>(ids.data(), n);
    push.values = std::span<const float>(grads.data(), n * kDim);
    PS_RETURN_IF_ERROR(store->ApplyPush(push, 0));
  }
  if (store->stored_rows(0) != rows) {
    return InternalError("the hashed table holds " + std::to_string(store->stored_rows(0)) +
                         " rows, not " + std::to_string(rows));
  }
  HashedRow row;
  row.rows = rows;
  row.bytes = rows * kDim * sizeof(float) * 2;
  std::vector<double> copy, pause, list;
  for (int r = 0; r < reps; ++r) {
    StatusOr<ShardSnapshot> copied = InternalError("not taken");
    copy.push_back(Time([&] { copied = store->Snapshot(job, 0, r + 1); }));
    PS_RETURN_IF_ERROR(copied.status());
    StatusOr<ShardSnapshot> shared = InternalError("not taken");
    pause.push_back(Time([&] { shared = store->SharedSnapshot(job, 0, r + 1); }));
    PS_RETURN_IF_ERROR(shared.status());
    list.push_back(Time([&] { shared->ListSharedRows(); }));
    if (shared->tables[0].ids != copied->tables[0].ids) {
      return DataLossError("the shared snapshot of the hashed table lists " +
                           std::to_string(shared->tables[0].ids.size()) + " rows, not the " +
                           std::to_string(copied->tables[0].ids.size()) + " of the copy");
    }
  }
  row.copy = Median(copy);
  row.pause = Median(pause);
  row.list = Median(list);

  // Pushes of random ids of the table, with a snapshot held and without.
  constexpr int kPushes = 20;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> push_ids(kHashedPushIds);
  const std::vector<float> push_grads(kHashedPushIds * kDim, 0.001f);
  const auto pushes = [&](std::vector<double>* times) -> Status {
    for (int p = 0; p < kPushes; ++p) {
      for (uint64_t& id : push_ids) id = (rng() % rows + 1) * 0x9e3779b97f4a7c15ull;
      std::sort(push_ids.begin(), push_ids.end());
      push_ids.erase(std::unique(push_ids.begin(), push_ids.end()), push_ids.end());
      Request push;
      push.header.op = Op::kPush;
      push.header.count = push_ids.size();
      push.header.dim = kDim;
      push.keys = push_ids;
      push.values = std::span<const float>(push_grads.data(), push_ids.size() * kDim);
      Status pushed;
      times->push_back(Time([&] { pushed = store->ApplyPush(push, 1); }));
      PS_RETURN_IF_ERROR(pushed);
      push_ids.resize(kHashedPushIds);
    }
    return Status::Ok();
  };
  std::vector<double> free_s, held_s;
  PS_RETURN_IF_ERROR(pushes(&free_s));
  {
    PS_ASSIGN_OR_RETURN(const ShardSnapshot copied, store->Snapshot(job, 0, reps + 1));
    PS_ASSIGN_OR_RETURN(ShardSnapshot shared, store->SharedSnapshot(job, 0, reps + 1));
    const uint64_t saves = store->snapshot_saves();
    PS_RETURN_IF_ERROR(pushes(&held_s));
    row.saves = store->snapshot_saves() - saves;
    shared.CopyShared();
    if (shared.tables[0].ids != copied.tables[0].ids ||
        !SameBits(shared.tables[0].values, copied.tables[0].values) ||
        !SameBits(shared.tables[0].slots[0], copied.tables[0].slots[0])) {
      return DataLossError("the shared snapshot of the hashed table changed with the pushes "
                           "after it");
    }
  }
  row.free_push = Median(free_s);
  row.free_longest = *std::max_element(free_s.begin(), free_s.end());
  row.held_push = Median(held_s);
  row.held_longest = *std::max_element(held_s.begin(), held_s.end());
  return row;
}

}  // namespace ps
