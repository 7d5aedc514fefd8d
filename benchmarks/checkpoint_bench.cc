// checkpoint_bench: what a checkpoint of one shard costs (the serving pause
// of its snapshot, shared with the store's blocks or, as before, copied;
// writing the generation, also while pushes change the blocks; reading and
// restoring it), against the disk's plain sequential write and read speed in
// the same run.
//
// Workload: one shard (a one-server job) holding one table of --floats
// floats (default 100M; rows = floats / dim, dim from --dim, default 16;
// several dims, e.g. --dim 16,1, give one row each) with adam, so values +
// 2 slots: 1.2 GB of state at the defaults. The store is filled with
// arbitrary bit patterns (values and both slots, NaNs included) through
// ShardStore::Restore, so nothing is zeros. A second store of the same
// layout is the restore target.
//
// Each repetition (--reps, default 3) runs, in this order:
//   copy            ShardStore::Snapshot: a copy of every value and slot
//                   (allocation and page faults included), the pause of a
//                   checkpoint before the shard shared its blocks
//   shared          ShardStore::SharedSnapshot: references to the store's
//                   copy-on-write blocks, what a shard takes now while it
//                   does not serve (its pause)
//   write, sync     CheckpointDir::Write of the copy with sync: true (every
//                   file and folder fsynced before the generation is
//                   visible)
//   shared, sync    the same of the shared snapshot (consumed: each block
//                   released once written), no push meanwhile
//   plain write     the same number of bytes (the copy's arrays) to one
//                   new file with write() calls of 8 MiB, then fsync
//                   (the three take turns going first)
//   read, cold      page cache dropped (sync; echo 3 > drop_caches), then
//                   CheckpointDir::Read (its arrays are allocated fresh)
//                   and ShardStore::Restore into the second store; then,
//                   the cache dropped again, RestoreStore (server/restore.h; the
//                   records straight into the blocks of a third store,
//                   created unwritten beforehand (CreateUnwritten: the
//                   restore's threads fault its pages in): what a
//                   restarting server does), "in place"
//   read, warm      the same again, the generation's files now cached
//   plain read      page cache dropped, the plain file read back with
//                   read() calls of 8 MiB into a buffer allocated and
//                   written before; then once more warm
//   write, no sync  CheckpointDir::Write with sync: false (then sync(),
//                   untimed, so its dirty pages do not slow what follows)
//   pushes          a shared snapshot of a third store of the same layout
//                   (its initial values: finite, as a trained model's)
//                   written with sync: true on a thread while this one
//                   pushes into that store (adam, one block's rows a push,
//                   block after block, back to back, as a shard's loop
//                   would with workers that push without pause): the
//                   write's time, the pushes made, the blocks they copied
//                   (copy_on_write_count), the median and the longest push;
//                   then the generation is read back and must equal a copy
//                   of the state taken just before the snapshot, bit for bit
// Before each write the previous generation or file is removed and sync()
// called, untimed, so no write pays for pruning, overwriting or earlier
// dirty pages. Without the right to drop
// the page cache (not root; or --no-cold) the cold columns read "n/a".
//
// MB/s = 10^6 bytes of state (values and slots: floats x 4 x 3) per second;
// the same byte count for the plain file. Times and MB/s are medians over
// repetitions; the ratios are medians of per-repetition ratios (ours /
// plain of the same repetition).
//
// Check: after every restore the second store's values and slots
// (CopyValues, CopySlot) must equal the snapshot's bit for bit, the
// snapshot must equal the first store, the generation written during the
// pushes must equal the state at its clock, the plain file read back must
// equal what was written, and the shared snapshot's pause (the median) must
// stay within 50 ms; a mismatch, a pause above that or any error prints it
// and exits 1 before any number is printed. The job flags results that are not
// finite (server.on_non_finite_result: flag) rather than refusing them, so
// that no push measures the table's bounds first (a pass over the whole
// table, a cost of refusing and not of checkpoints).
//
// Last, a store holding a hashed table of --hashed-rows rows (default 1M)
// of dim 16 with adagrad: the copy a snapshot took before, the pause of a
// shared snapshot (its chunks of rows shared; within the same 50 ms bound)
// and the listing of its rows on the writer's thread, medians of --reps;
// and pushes of random ids with a shared snapshot held and without.
//
// --quick (200,003 floats, dims 16 and 1 and 20000 (a run of one row per
// record), 1 repetition, no cache dropping, 20,000 hashed rows) is the
// ctest smoke test; its numbers mean nothing.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchmarks/checkpoint_bench_cases.h"
#include "benchmarks/machine.h"
#include "common/options.h"
#include "common/status.h"
#include "server/checkpoint.h"
#include "server/restore.h"
#include "store/shard_store.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kIoBytes = size_t{8} << 20;
// The most a shared snapshot may stop the shard's loop (the median of the
// repetitions), for the default 1.2 GB and any smaller table.
constexpr double kSharedPauseBound = 0.050;

struct Config {
  uint64_t floats = 100000000;
  std::vector<uint32_t> dims = {16};
  int reps = 3;
  bool cold = true;
  std::string dir;  // parent of the benchmark's own folder
  uint64_t hashed_rows = 1000000;  // rows of the hashed table whose pause is measured; 0: none
};

// Fills `a` with the patterns of array `k`.
void Fill(std::vector<float>* a, uint64_t k) {
  for (size_t i = 0; i < a->size(); ++i) {
    const uint32_t b = PatternBits(i, k);
    std::memcpy(&(*a)[i], &b, sizeof b);
  }
}

// Checks that `store` holds exactly the snapshot's values and slots.
Status CheckStore(const ShardStore& store, const ShardSnapshot& s, const std::string& what) {
  if (!SameBits(store.CopyValues(0), s.tables[0].values)) {
    return DataLossError(what + ": the values differ from the snapshot's");
  }
  for (uint32_t k = 0; k < s.tables[0].slots.size(); ++k) {
    if (!SameBits(store.CopySlot(0, k), s.tables[0].slots[k])) {
      return DataLossError(what + ": slot " + std::to_string(k) + " differs from the snapshot's");
    }
  }
  return Status::Ok();
}

Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min(n, kIoBytes));
    if (w < 0) {
      if (errno == EINTR) continue;
      return InternalError("cannot write " + path + ": " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// The plain baseline: the snapshot's arrays to one new file, then fsync.
Status PlainWrite(const ShardSnapshot& s, const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return InternalError("cannot create " + path + ": " + std::strerror(errno));
  Status st = Status::Ok();
  for (const std::vector<float>* a : Arrays(s)) {
    st = WriteAll(fd, reinterpret_cast<const char*>(a->data()), a->size() * sizeof(float), path);
    if (!st.ok()) break;
  }
  if (st.ok() && ::fsync(fd) != 0) st = InternalError("cannot sync " + path);
  ::close(fd);
  return st;
}

Status PlainRead(const std::string& path, std::vector<char>* buffer) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return InternalError("cannot open " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < buffer->size()) {
    const ssize_t r = ::read(fd, buffer->data() + done, std::min(buffer->size() - done, kIoBytes));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      return InternalError("cannot read " + path + (r < 0 ? std::string(": ") + std::strerror(errno)
                                                           : std::string(": short file")));
    }
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  return Status::Ok();
}

// Bytes of the files under `dir`.
uint64_t DiskBytes(const fs::path& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

struct Row {
  uint32_t dim = 0;
  uint64_t rows = 0;
  uint64_t bytes = 0;       // state: values + slots
  uint64_t disk_bytes = 0;  // the generation's files
  // Seconds, medians.
  double snapshot = 0, shared_snapshot = 0, write_sync = 0, write_shared = 0, write_nosync = 0;
  double plain_write = 0;
  // The write of a shared snapshot during pushes: seconds, pushes made,
  // blocks they copied, the longest push in seconds (medians).
  double write_pushed = 0, pushes = 0, pushed_copies = 0, median_push = 0, longest_push = 0;
  uint64_t blocks = 0;
  double read_cold = 0, restore_cold = 0, read_warm = 0, restore_warm = 0;
  double in_place_cold = 0, in_place_warm = 0;
  double plain_read_cold = 0, plain_read_warm = 0;
  // Medians of per-repetition ratios of MB/s (ours / plain).
  double write_ratio = 0, read_cold_ratio = 0, read_warm_ratio = 0;
  bool cold = false;
};

StatusOr<Row> RunDim(uint32_t dim, const Config& cfg, const fs::path& dir) {
  const uint64_t rows = cfg.floats / dim;
  if (rows == 0) return InvalidArgumentError("--floats is smaller than dim " + std::to_string(dim));
  JobOptions job;
  job.cluster.servers = {"127.0.0.1:7000"};
  job.cluster.workers = 1;
  TableOptions t;
  t.name = "emb";
  t.rows = rows;
  t.dim = dim;
  t.init.kind = InitKind::kUniform;
  t.init.value = 0.5f;
  t.optimizer.kind = OptimizerKind::kAdam;
  t.optimizer.lr = 0.001f;
  job.tables = {t};
  job.server.on_non_finite_result = NonFiniteResultPolicy::kFlag;  // no bounds to measure
  PS_RETURN_IF_ERROR(job.Validate());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::Create(job, 0));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> target, ShardStore::Create(job, 0));
  // The store written during pushes: its initial values, all finite, as a
  // trained model's (the patterns' NaNs would send every push through the
  // count of results that are not finite).
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> live, ShardStore::Create(job, 0));
  {
    // Arbitrary bits in every value and slot.
    PS_ASSIGN_OR_RETURN(ShardSnapshot fill, store->Snapshot(job, 0, 0));
    Fill(&fill.tables[0].values, 0);
    for (size_t k = 0; k < fill.tables[0].slots.size(); ++k) Fill(&fill.tables[0].slots[k], k + 1);
    store->Restore(fill);
    PS_RETURN_IF_ERROR(CheckStore(*store, fill, "the filled store"));
  }

  Row row;
  row.dim = dim;
  row.rows = rows;
  row.bytes = rows * dim * sizeof(float) * (1 + t.optimizer.Slots());
  row.cold = cfg.cold;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointDir> ckpt,
                      CheckpointDir::Open(ShardCheckpointDir(dir.string(), 0)));
  const std::string plain = (dir / "plain.bin").string();
  std::vector<char> buffer(row.bytes);
  std::memset(buffer.data(), 1, buffer.size());

  std::vector<double> snap_s, wsync_s, wnosync_s, pw_s, rc_s, rsc_s, rw_s, rsw_s, prc_s, prw_s;
  std::vector<double> shared_s, wshared_s, wpushed_s, pushes_n, copies_n, median_push_s;
  std::vector<double> longest_s;
  std::vector<double> ipc_s, ipw_s;  // in place, cold and warm
  std::vector<double> w_ratio, rc_ratio, rw_ratio;
  const auto remove_generations = [&]() -> Status {
    PS_ASSIGN_OR_RETURN(std::vector<int64_t> gens, ckpt->Generations());
    for (int64_t g : gens) fs::remove_all(ckpt->GenerationPath(g));
    return Status::Ok();
  };
  for (int r = 0; r < cfg.reps; ++r) {
    const int64_t clock = r + 1;
    StatusOr<ShardSnapshot> snap = InternalError("not taken");
    snap_s.push_back(Time([&] { snap = store->Snapshot(job, 0, clock); }));
    PS_RETURN_IF_ERROR(snap.status());
    PS_RETURN_IF_ERROR(CheckStore(*store, *snap, "the snapshot"));
    StatusOr<ShardSnapshot> shared = InternalError("not taken");
    shared_s.push_back(Time([&] { shared = store->SharedSnapshot(job, 0, clock); }));
    PS_RETURN_IF_ERROR(shared.status());
    row.blocks = shared->tables[0].shared.size();

    // The synced writes, each first in turn.
    Status st = Status::Ok();
    for (int w = 0; w < 3; ++w) {
      const int which = (w + r) % 3;
      if (which == 0) {
        PS_RETURN_IF_ERROR(remove_generations());
        ::sync();
        wsync_s.push_back(Time([&] { st = ckpt->Write(*snap, {.sync = true, .keep = 1}); }));
        PS_RETURN_IF_ERROR(st);
        row.disk_bytes = DiskBytes(ckpt->GenerationPath(clock));
      } else if (which == 1) {
        PS_RETURN_IF_ERROR(remove_generations());
        ::sync();
        wshared_s.push_back(
            Time([&] { st = ckpt->Write(std::move(*shared), {.sync = true, .keep = 1}); }));
        PS_RETURN_IF_ERROR(st);
      } else {
        fs::remove(plain);
        ::sync();
        pw_s.push_back(Time([&] { st = PlainWrite(*snap, plain); }));
        PS_RETURN_IF_ERROR(st);
      }
    }
    w_ratio.push_back(pw_s.back() / wsync_s.back());

    // Reads: cold (when the cache can be dropped), then warm.
    for (const bool cold : {true, false}) {
      if (cold && !cfg.cold) continue;
      if (cold) PS_RETURN_IF_ERROR(DropCaches("--no-cold"));
      StatusOr<ShardSnapshot> read = InternalError("not read");
      const double rs = Time([&] { read = ckpt->Read(clock); });
      PS_RETURN_IF_ERROR(read.status());
      PS_RETURN_IF_ERROR(CheckRestorable(*read, target->Layout(job, 0, clock), ckpt->path()));
      const double ts = Time([&] { target->Restore(*read); });
      PS_RETURN_IF_ERROR(CheckStore(*target, *snap, "the restored store"));
      (cold ? rc_s : rw_s).push_back(rs);
      (cold ? rsc_s : rsw_s).push_back(ts);
      // A fresh store, made (untimed) as a restarting server makes it:
      // unwritten, its pages first touched by the restore.
      StatusOr<std::unique_ptr<ShardStore>> fresh = ShardStore::CreateUnwritten(job, 0);
      PS_RETURN_IF_ERROR(fresh.status());
      if (cold) PS_RETURN_IF_ERROR(DropCaches("--no-cold"));
      StatusOr<size_t> tables = InternalError("not restored");
      const double ips = Time([&] { tables = RestoreStore(*ckpt, clock, job, 0, fresh->get()); });
      PS_RETURN_IF_ERROR(tables.status());
      PS_RETURN_IF_ERROR(CheckStore(**fresh, *snap, "the store restored in place"));
      (cold ? ipc_s : ipw_s).push_back(ips);
    }
    for (const bool cold : {true, false}) {
      if (cold && !cfg.cold) continue;
      if (cold) PS_RETURN_IF_ERROR(DropCaches("--no-cold"));
      const double ps = Time([&] { st = PlainRead(plain, &buffer); });
      PS_RETURN_IF_ERROR(st);
      (cold ? prc_s : prw_s).push_back(ps);
    }
    size_t offset = 0;
    for (const std::vector<float>* a : Arrays(*snap)) {
      if (std::memcmp(buffer.data() + offset, a->data(), a->size() * sizeof(float)) != 0) {
        return DataLossError(plain + ": read back differs from what was written");
      }
      offset += a->size() * sizeof(float);
    }
    if (cfg.cold) rc_ratio.push_back(prc_s.back() / ipc_s.back());
    rw_ratio.push_back(prw_s.back() / ipw_s.back());

    PS_RETURN_IF_ERROR(remove_generations());
    ::sync();
    wnosync_s.push_back(Time([&] { st = ckpt->Write(*snap, {.sync = false, .keep = 1}); }));
    PS_RETURN_IF_ERROR(st);
    ::sync();

    PS_ASSIGN_OR_RETURN(const PushedWrite pushed, WriteWhilePushing(job, *live, *ckpt, clock));
    wpushed_s.push_back(pushed.write_s);
    pushes_n.push_back(static_cast<double>(pushed.pushes));
    copies_n.push_back(static_cast<double>(pushed.copies));
    median_push_s.push_back(pushed.median_push_s);
    longest_s.push_back(pushed.longest_push_s);
    std::fprintf(stderr,
                 "checkpoint_bench: dim %u rep %d: copy %.3f s, shared %.4f s, write sync %.2f s, "
                 "shared %.2f s, plain write %.2f s, write no sync %.2f s; during pushes %.2f s "
                 "(%" PRIu64 " pushes, %" PRIu64 " blocks copied, median %.1f ms, longest %.1f "
                 "ms)\n",
                 dim, r + 1, snap_s.back(), shared_s.back(), wsync_s.back(), wshared_s.back(),
                 pw_s.back(), wnosync_s.back(), pushed.write_s, pushed.pushes, pushed.copies,
                 pushed.median_push_s * 1e3, pushed.longest_push_s * 1e3);
  }
  PS_RETURN_IF_ERROR(remove_generations());
  fs::remove(plain);

  row.snapshot = Median(snap_s);
  row.shared_snapshot = Median(shared_s);
  if (row.shared_snapshot > kSharedPauseBound) {
    return InternalError("dim " + std::to_string(dim) + ": the shared snapshot stopped the loop " +
                         std::to_string(row.shared_snapshot * 1e3) + " ms (median), above its " +
                         "bound of " + std::to_string(kSharedPauseBound * 1e3) + " ms");
  }
  row.write_shared = Median(wshared_s);
  row.write_pushed = Median(wpushed_s);
  row.pushes = Median(pushes_n);
  row.pushed_copies = Median(copies_n);
  row.median_push = Median(median_push_s);
  row.longest_push = Median(longest_s);
  row.write_sync = Median(wsync_s);
  row.write_nosync = Median(wnosync_s);
  row.plain_write = Median(pw_s);
  row.read_cold = Median(rc_s);
  row.restore_cold = Median(rsc_s);
  row.read_warm = Median(rw_s);
  row.restore_warm = Median(rsw_s);
  row.in_place_cold = Median(ipc_s);
  row.in_place_warm = Median(ipw_s);
  row.plain_read_cold = Median(prc_s);
  row.plain_read_warm = Median(prw_s);
  row.write_ratio = Median(w_ratio);
  row.read_cold_ratio = Median(rc_ratio);
  row.read_warm_ratio = Median(rw_ratio);
  return row;
}

Status RunAll(const Config& cfg) {
  const fs::path parent = cfg.dir.empty() ? fs::temp_directory_path() : fs::path(cfg.dir);
  const fs::path dir = parent / ("ps_checkpoint_bench_" + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir.string() + ": " + ec.message());
  const auto began = SteadyClock::now();
  std::vector<Row> rows;
  Status status = Status::Ok();
  for (uint32_t dim : cfg.dims) {
    std::fprintf(stderr, "checkpoint_bench: dim %u ...\n", dim);
    StatusOr<Row> row = RunDim(dim, cfg, dir);
    if (!row.ok()) {
      status = row.status();
      break;
    }
    rows.push_back(*row);
  }
  fs::remove_all(dir, ec);
  PS_RETURN_IF_ERROR(status);
  HashedRow hashed;
  if (cfg.hashed_rows > 0) {
    std::fprintf(stderr, "checkpoint_bench: a hashed table of %" PRIu64 " rows ...\n",
                 cfg.hashed_rows);
    PS_ASSIGN_OR_RETURN(hashed, HashedSnapshotPause(cfg.hashed_rows, cfg.reps));
    if (hashed.pause > kSharedPauseBound) {
      return InternalError("the shared snapshot of " + std::to_string(hashed.rows) +
                           " hashed rows stopped the loop " + std::to_string(hashed.pause * 1e3) +
                           " ms (median), above its bound of " +
                           std::to_string(kSharedPauseBound * 1e3) + " ms");
    }
  }
  const double total = std::chrono::duration<double>(SteadyClock::now() - began).count();

  const auto mbs = [](const Row& r, double s) { return static_cast<double>(r.bytes) / 1e6 / s; };
  const auto cell = [&](const Row& r, double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", mbs(r, s));
    return std::string(buf);
  };
  std::printf("# checkpoint_bench: checkpoint write and restore against plain file I/O\n\n");
  std::printf(
      "%u hardware threads, CPU %s. One shard, one table of %" PRIu64
      " floats with adam (values + 2 slots); files under %s; %d repetition(s); %.0f s in all. "
      "MB/s = 10^6 bytes of state per second; times and MB/s are medians, ratios medians of "
      "per-repetition ratios.\n\n",
      std::thread::hardware_concurrency(), CpuModel().c_str(), cfg.floats, parent.c_str(),
      cfg.reps, total);
  std::printf(
      "Pause = the loop's stop to take the snapshot: a copy of the state (ShardStore::Snapshot, "
      "before) or references to its blocks (SharedSnapshot, now; about one per MiB of values, "
      "counted below). Writes with sync: true; \"write\" of the copy, \"shared\" of the "
      "shared snapshot, no push meanwhile.\n\n");
  std::printf(
      "| dim | rows | state MB | on disk / state | pause: copy s | pause: shared ms | write s | "
      "MB/s | shared s | MB/s | write, no sync s | MB/s | plain write + fsync MB/s | "
      "write sync / plain |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf(
        "| %u | %" PRIu64 " | %.0f | %.3f | %.3f | %.3f | %.2f | %s | %.2f | %s | %.2f | %s | %s "
        "| %.2f |\n",
        r.dim, r.rows, static_cast<double>(r.bytes) / 1e6,
        static_cast<double>(r.disk_bytes) / static_cast<double>(r.bytes), r.snapshot,
        r.shared_snapshot * 1e3, r.write_sync, cell(r, r.write_sync).c_str(), r.write_shared,
        cell(r, r.write_shared).c_str(), r.write_nosync, cell(r, r.write_nosync).c_str(),
        cell(r, r.plain_write).c_str(), r.write_ratio);
  }
  if (hashed.rows > 0) {
    std::printf(
        "\nA hashed table alone in a store (dim 16, adagrad): the copy a snapshot took before "
        "(Snapshot: a copy and a sort by hash slot, then id), the pause of the shared snapshot "
        "now (references to its chunks of rows), and the listing of its rows in key order that "
        "the writer's thread does; then %" PRIu64 " pushes of %" PRIu64 " random ids with the "
        "snapshot held (each row a push changes is saved for it first, once) and with none "
        "held: median and longest, and the rows saved.\n\n",
        uint64_t{20}, kHashedPushIds);
    std::printf(
        "| hashed rows | state MB | copy ms (before) | pause ms (now) | list ms (writer) | push "
        "ms, held | longest | push ms, none held | longest | rows saved |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    std::printf("| %" PRIu64 " | %.0f | %.1f | %.3f | %.0f | %.2f | %.2f | %.2f | %.2f | %" PRIu64
                " |\n",
                hashed.rows, static_cast<double>(hashed.bytes) / 1e6, hashed.copy * 1e3,
                hashed.pause * 1e3, hashed.list * 1e3, hashed.held_push * 1e3,
                hashed.held_longest * 1e3, hashed.free_push * 1e3, hashed.free_longest * 1e3,
                hashed.saves);
  }
  std::printf(
      "\nThe shared snapshot written (sync: true) while the loop pushes one block's rows after "
      "another without pause (adam; another store of the same layout, holding its initial "
      "values): the pushes proceed, each copying a block the writer still holds, once. Medians "
      "per write of the pushes, the blocks copied, the median push and the longest.\n\n");
  std::printf(
      "| dim | blocks | write during pushes s | MB/s | pushes | blocks copied | push ms, median "
      "| longest |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %u | %" PRIu64 " | %.2f | %s | %.0f | %.0f | %.2f | %.1f |\n", r.dim, r.blocks,
                r.write_pushed, cell(r, r.write_pushed).c_str(), r.pushes, r.pushed_copies,
                r.median_push * 1e3, r.longest_push * 1e3);
  }
  std::printf(
      "\nRead = CheckpointDir::Read (records into new arrays); restore = ShardStore::Restore "
      "(into the store's blocks); in place = RestoreStore (server/restore.h) (records straight into the "
      "store's blocks: what a restarting server does); MB/s and ratios of in place. Cold: page "
      "cache dropped first.\n\n");
  std::printf(
      "| dim | cold: read s | restore s | in place s | MB/s | plain read MB/s | in place / plain "
      "| warm: read s | restore s | in place s | MB/s | plain read MB/s | in place / plain |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    if (r.cold) {
      std::printf("| %u | %.2f | %.2f | %.2f | %s | %s | %.2f ", r.dim, r.read_cold,
                  r.restore_cold, r.in_place_cold, cell(r, r.in_place_cold).c_str(),
                  cell(r, r.plain_read_cold).c_str(), r.read_cold_ratio);
    } else {
      std::printf("| %u | n/a | n/a | n/a | n/a | n/a | n/a ", r.dim);
    }
    std::printf("| %.2f | %.2f | %.2f | %s | %s | %.2f |\n", r.read_warm, r.restore_warm,
                r.in_place_warm, cell(r, r.in_place_warm).c_str(),
                cell(r, r.plain_read_warm).c_str(), r.read_warm_ratio);
  }
  std::printf(
      "\nEvery restore matched the snapshot bit for bit, every generation written during "
      "pushes matched the state at its clock, the plain file read back matched what was "
      "written, and the shared snapshot stopped the loop within its bound of %.0f ms.\n",
      kSharedPauseBound * 1e3);
  return Status::Ok();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  CLI::App app{"Checkpoint write and restore of one shard against plain file I/O"};
  bool quick = false;
  ps::Config cfg;
  app.add_flag("--quick", quick,
               "Smoke test: 200,003 floats, dims 16, 1 and 20000, 1 repetition, no cache "
               "dropping, 20,000 hashed rows (unless --floats/--dim/--reps/--cold/--hashed-rows "
               "are given)");
  app.add_option("--floats", cfg.floats, "Floats per array (values; each slot the same)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34));
  app.add_option("--dim", cfg.dims, "Table dim; several (16,1) give one row each")
      ->delimiter(',')
      ->check(CLI::Range(uint32_t{1}, uint32_t{1} << 24));
  app.add_option("--reps", cfg.reps, "Repetitions (the median is reported)")
      ->check(CLI::Range(1, 100));
  app.add_flag("--cold,!--no-cold", cfg.cold,
               "Drop the page cache before the cold reads (needs root; default on)");
  app.add_option("--hashed-rows", cfg.hashed_rows,
                 "Rows of the hashed table whose snapshot pause is measured (0: none)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 32));
  app.add_option("--dir", cfg.dir,
                 "Folder to create the benchmark's files in (default: the temporary folder); "
                 "removed afterwards");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    if (app.count("--floats") == 0) cfg.floats = 200003;
    if (app.count("--dim") == 0) cfg.dims = {16, 1, 20000};
    if (app.count("--reps") == 0) cfg.reps = 1;
    if (app.count("--cold") == 0 && app.count("--no-cold") == 0) cfg.cold = false;
    if (app.count("--hashed-rows") == 0) cfg.hashed_rows = 20000;
  }
  ps::Status s = ps::RunAll(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "checkpoint_bench: FAILED: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
