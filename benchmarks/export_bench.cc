// export_bench: what `ps_ctl export` costs, against reading the same
// generations with CheckpointDir::Read (the reader alone) and against the
// disk's plain sequential write of the same bytes, in the same run.
//
// Workload: a checkpoint of 2 shards written by the real writer (sync off,
// then sync()): a range table of --floats floats (default 50M; rows =
// floats / 16, dim 16) and a hashed table of --hashed-rows rows (default
// 1M, dim 16, 4096 hash slots, random ids), both with adam (values + 2
// state arrays), filled with arbitrary bit patterns. At the defaults:
// (50M + 16M) x 3 x 4 bytes = 792 MB of state.
//
// Each repetition (--reps, default 3), files warm in the page cache:
//   read        CheckpointDir::Read of both shards' generation (the
//               snapshots allocated fresh): the reader's own cost
//   arrays      CheckpointArrays into arrays in memory (what
//               ps.read_checkpoint does): the shards put together, the
//               hashed rows put in id order
//   export      ExportCheckpoint into a new folder: .npy files through
//               memory maps, msync and fsync each, the manifest
//   plain       the same number of bytes written to one new file with
//               write() calls of 8 MiB, then fsync
// Before each export or plain write the previous output is removed and
// sync() called, untimed.
//
// MB/s = 10^6 bytes of state per second. Times and MB/s are medians over
// repetitions; the ratios are medians of per-repetition ratios.
//
// Check: every export's range values must equal the snapshots' bit for
// bit, its ids be the snapshots' ids ascending, and a hashed row its id's
// row; a mismatch or an error prints it and exits 1 before any number is
// printed. --quick (200,000 floats, 5,000 hashed rows, 1 repetition) is
// the ctest smoke test; its numbers mean nothing.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/hash_slots.h"
#include "server/checkpoint.h"
#include "server/checkpoint_arrays.h"
#include "server/checkpoint_export.h"
#include "server/checkpoint_layout.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kDim = 16;
constexpr uint32_t kShards = 2;
constexpr uint32_t kHashSlots = 4096;
constexpr const char* kOptimizer = "adam lr=0.01";

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "export_bench: %s\n", what.c_str());
  std::exit(1);
}

void RandomFill(std::vector<float>& v, size_t n, std::mt19937_64& rng) {
  v.resize(n);
  for (size_t i = 0; i < n; i += 2) {
    const uint64_t bits = rng();
    std::memcpy(&v[i], &bits, std::min<size_t>(2, n - i) * sizeof(float));
  }
}

std::vector<ps::ShardSnapshot> MakeShards(uint64_t floats, uint64_t hashed_rows) {
  std::mt19937_64 rng(42);
  std::vector<uint64_t> ids;
  ids.reserve(hashed_rows);
  while (ids.size() < hashed_rows) ids.push_back(rng());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const uint64_t rows = floats / kDim;
  std::vector<ps::ShardSnapshot> shards;
  for (uint32_t s = 0; s < kShards; ++s) {
    ps::ShardSnapshot snap;
    snap.shard = s;
    snap.num_shards = kShards;
    snap.clock = 10;
    snap.fingerprint = "export-bench";
    ps::TableSnapshot t;
    t.name = "emb";
    t.rows = rows;
    t.dim = kDim;
    t.optimizer = kOptimizer;
    t.owned = {rows * s / kShards, rows * (s + 1) / kShards};
    RandomFill(t.values, t.owned.size() * kDim, rng);
    t.slots.resize(2);
    for (auto& slot : t.slots) RandomFill(slot, t.owned.size() * kDim, rng);
    snap.tables.push_back(std::move(t));
    ps::TableSnapshot h;
    h.name = "ids";
    h.hashed = true;
    h.dim = kDim;
    h.hash_slots = kHashSlots;
    h.optimizer = kOptimizer;
    h.owned = {kHashSlots * s / kShards, kHashSlots * (s + 1) / kShards};
    const uint64_t seed = ps::NameHash(h.name);
    for (uint64_t id : ids) {
      if (h.owned.Contains(ps::IdSlot(id, seed, kHashSlots))) h.ids.push_back(id);
    }
    ps::SortBySlotThenId(h.ids, seed, kHashSlots);  // a generation's order
    h.stored_rows = h.ids.size();
    RandomFill(h.values, h.ids.size() * kDim, rng);
    h.slots.resize(2);
    for (auto& slot : h.slots) RandomFill(slot, h.ids.size() * kDim, rng);
    snap.tables.push_back(std::move(h));
    shards.push_back(std::move(snap));
  }
  return shards;
}

// The data of a .npy file, mapped; checked against `want` (bytes).
bool SameData(const std::string& path, const void* want, size_t bytes, size_t at = 0) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  void* map = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return false;
  const auto* p = static_cast<const unsigned char*>(map);
  const size_t header = 10 + (p[8] | (size_t{p[9]} << 8));
  const bool same = header + at + bytes <= static_cast<size_t>(size) &&
                    std::memcmp(p + header + at, want, bytes) == 0;
  ::munmap(map, static_cast<size_t>(size));
  return same;
}

void CheckExport(const std::string& out, const std::vector<ps::ShardSnapshot>& shards) {
  size_t at = 0;
  for (const auto& s : shards) {
    const auto& t = s.tables[0];
    for (size_t k = 0; k < 3; ++k) {
      const std::vector<float>& a = k == 0 ? t.values : t.slots[k - 1];
      const std::string file = out + (k == 0   ? "/emb.values.npy"
                                      : k == 1 ? "/emb.first_moment.npy"
                                               : "/emb.second_moment.npy");
      if (!SameData(file, a.data(), a.size() * 4, at)) {
        Fail(file + ": shard " + std::to_string(s.shard) + "'s rows differ from the snapshot");
      }
    }
    at += t.values.size() * 4;
  }
  // Ids ascending; the row of each id is its snapshot row.
  std::vector<std::pair<uint64_t, const float*>> rows;
  for (const auto& s : shards) {
    const auto& h = s.tables[1];
    for (size_t i = 0; i < h.ids.size(); ++i) rows.emplace_back(h.ids[i], &h.values[i * kDim]);
  }
  std::sort(rows.begin(), rows.end());
  std::vector<uint64_t> ids;
  std::vector<float> values;
  for (const auto& [id, row] : rows) {
    ids.push_back(id);
    values.insert(values.end(), row, row + kDim);
  }
  if (!SameData(out + "/ids.ids.npy", ids.data(), ids.size() * 8)) Fail("ids.ids.npy differs");
  if (!SameData(out + "/ids.values.npy", values.data(), values.size() * 4)) {
    Fail("ids.values.npy: a row is not its id's");
  }
}

// A target of plain vectors, as ps.read_checkpoint's numpy arrays.
class MemoryTarget final : public ps::ArrayTarget {
 public:
  ps::StatusOr<ps::TableArrays> Arrays(size_t, const ps::ArrayTable& t) override {
    const size_t n = t.rows * t.dim * sizeof(float);
    ps::TableArrays a;
    buffers_.emplace_back(n);
    a.values = buffers_.back();
    for (size_t k = 0; k < t.slot_names.size(); ++k) {
      buffers_.emplace_back(n);
      a.slots.push_back(buffers_.back());
    }
    if (t.hashed) {
      buffers_.emplace_back(t.rows * sizeof(uint64_t));
      a.ids = buffers_.back();
    }
    return a;
  }

 private:
  std::vector<std::vector<std::byte>> buffers_;
};

double PlainWrite(const std::string& path, uint64_t bytes) {
  std::vector<char> block(8 << 20, 'x');
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Fail("cannot create " + path);
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(block.size(), bytes - done));
    const ssize_t w = ::write(fd, block.data(), n);
    if (w <= 0) Fail("cannot write " + path);
    done += static_cast<uint64_t>(w);
  }
  if (::fsync(fd) != 0) Fail("cannot sync " + path);
  ::close(fd);
  return Seconds(start);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"export_bench: ps_ctl export against the checkpoint reader and plain writes"};
  uint64_t floats = 50'000'000;
  uint64_t hashed_rows = 1'000'000;
  int reps = 3;
  bool quick = false;
  std::string dir = "/tmp";
  app.add_option("--floats", floats, "floats of the range table (dim 16)");
  app.add_option("--hashed-rows", hashed_rows, "rows of the hashed table (dim 16)");
  app.add_option("--reps", reps, "repetitions")->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "folder for the checkpoint, the exports and the plain file");
  app.add_flag("--quick", quick, "a small run for ctest: its numbers mean nothing");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    floats = 200'000;
    hashed_rows = 5'000;
    reps = 1;
  }
  const std::string root = dir + "/export_bench_" + std::to_string(::getpid());
  const std::string ckpt = root + "/ckpt";
  fs::remove_all(root);
  const std::vector<ps::ShardSnapshot> shards = MakeShards(floats, hashed_rows);
  uint64_t state_bytes = 0;
  for (const auto& s : shards) {
    for (const auto& t : s.tables) state_bytes += t.values.size() * 4 * (1 + t.slots.size());
  }
  std::vector<std::unique_ptr<ps::CheckpointDir>> dirs;
  for (const auto& s : shards) {
    auto d = ps::CheckpointDir::Open(ps::ShardCheckpointDir(ckpt, s.shard));
    if (!d.ok()) Fail(d.status().ToString());
    ps::CheckpointWriteOptions o;
    o.sync = false;
    if (ps::Status w = (*d)->Write(s, o); !w.ok()) Fail(w.ToString());
    dirs.push_back(std::move(*d));
  }
  ::sync();

  std::vector<double> read_s, arrays_s, export_s, plain_s, vs_read, vs_plain;
  for (int r = 0; r < reps; ++r) {
    auto start = Clock::now();
    for (const auto& d : dirs) {
      auto snap = d->Read(10);
      if (!snap.ok()) Fail(snap.status().ToString());
    }
    read_s.push_back(Seconds(start));

    start = Clock::now();
    {
      auto arrays = ps::CheckpointArrays::Open(ckpt, std::nullopt);
      if (!arrays.ok()) Fail(arrays.status().ToString());
      MemoryTarget target;
      if (ps::Status s = (*arrays)->ReadInto(&target, nullptr); !s.ok()) Fail(s.ToString());
    }
    arrays_s.push_back(Seconds(start));

    const std::string out = root + "/out";
    fs::remove_all(out);
    ::sync();
    start = Clock::now();
    auto done = ps::ExportCheckpoint(ckpt, out, {});
    export_s.push_back(Seconds(start));
    if (!done.ok()) Fail(done.status().ToString());
    CheckExport(out, shards);
    fs::remove_all(out);

    const std::string plain = root + "/plain";
    fs::remove(plain);
    ::sync();
    plain_s.push_back(PlainWrite(plain, state_bytes));
    fs::remove(plain);
    vs_read.push_back(export_s.back() / read_s.back());
    vs_plain.push_back(export_s.back() / plain_s.back());
  }
  fs::remove_all(root);

  const double mb = static_cast<double>(state_bytes) / 1e6;
  std::printf(
      "export_bench: 2 shards, range %llu floats + hashed %llu rows, dim 16, adam: "
      "%.0f MB of state, %d reps, warm cache\n",
      static_cast<unsigned long long>(floats), static_cast<unsigned long long>(hashed_rows), mb,
      reps);
  std::printf("| step | s | MB/s |\n|---|---|---|\n");
  const auto row = [&](const char* what, const std::vector<double>& s) {
    std::printf("| %s | %.3f | %.0f |\n", what, Median(s), mb / Median(s));
  };
  row("read (CheckpointDir::Read, both shards)", read_s);
  row("arrays (CheckpointArrays into memory)", arrays_s);
  row("export (.npy files + manifest, fsynced)", export_s);
  row("plain write of the same bytes + fsync", plain_s);
  std::printf("export / read: %.2fx, export / plain write: %.2fx\n", Median(vs_read),
              Median(vs_plain));
  return 0;
}
