// hashed_rows_bench: the rows of a hash-keyed table (store/hashed_rows.h,
// an open-addressing index of our own over packed rows) against the same
// rows found through Abseil's flat_hash_map (Debian's libabsl-dev, the
// SwissTable), in one run, on one thread.
//
// Workload: --rows ids (default 1M, 64-bit values from a fixed seed) of
// --dim floats (default 16, sgd without state), made by a first push each,
// then, each timed and repeated --reps times (median reported):
//   gather     a pull of --batch distinct ids (default 4096) drawn from the
//              ids with rows, values copied into a buffer: the pull path
//   apply      a push of the same ids with sgd: find each row, update it
//   miss       a pull of --batch ids that have no row (initial values
//              computed: the admission-filtered or never-seen ids)
//   churn      --batch erases of ids with rows and --batch makes of new
//              ids: eviction under the memory bound
// Both sides run the same ids in the same order and do the same float
// work; only the index differs. Reported: million ids per second per side
// and ours/absl (higher is better for ours).
//
// --evict instead times eviction (`evict`): a table of --rows rows of
// --dim floats under adagrad takes pushes of --batch new ids, one clock
// each, timed one by one: with room (no eviction: the baseline), at its
// bound under lru and under lfu (each push evicts --batch rows), and with
// every row idle (idle_clocks: each push also removes up to
// max(1024, 2 * batch) idle rows). The tables with room may double their
// index during the timed pushes: their longest push is that. Reported: the median, 99th percentile
// and longest push, and the median against the baseline's: the longest
// step eviction adds to the shard's loop.
//
// --memory instead measures what a row costs: for each dim and optimizer
// of the table in config/README.md, a child process fills one table with
// --rows rows and reports its resident memory's growth per row (from
// /proc/self/statm) beside bytes() per row and row_bytes().
//
// --vs-dense instead sets a hashed table beside a dense range table of the
// same rows, through the shard's own store (ShardStore::ReadRows and
// ApplyPush, one store per table, on one thread): --rows rows (default 1M;
// 10^7 in the README's table) of --dim floats under adagrad (lr 0.05,
// constant init 0.01, so that both tables start alike), the dense table's
// ids the row numbers 0 .. rows-1, the hashed table's ids SplitMix(row) (a
// bijection: arbitrary 64-bit values), made by pushes of zero gradients in
// the order of their rows before anything is timed. Each batch is --batch
// draws (default 4096) from a Zipf law over the rows (--zipf, default 1.1;
// rank 1 the most frequent), with each id's rows summed and named once as
// the client does (IdDedup::SumDuplicates, in the order of first draw), so
// a batch holds fewer distinct ids than draws. The ranks lie on rows in
// two ways, each measured and reported on its own: "together", rank k on
// row k - 1 (the hot rows next to each other, as in a vocabulary sorted
// by frequency, and as in a hashed table whose rows were made in the
// order the stream first named them), and "spread", rank k on row
// (k - 1) * A mod rows for a large prime A (the hot rows scattered over
// both tables).
// Per repetition (--reps, default 7), --batches new batches (default 128)
// are drawn, then timed as a whole for each of the four steps, dense and
// hashed alternating which goes first:
//   pull   ReadRows of each batch: the rows gathered into a new reply frame
//   push   ApplyPush of each batch with its summed gradients (adagrad)
// Reported: million distinct ids per second (median over repetitions) per
// table, hashed / dense per repetition, and the bytes a row takes per
// table: counted (the dense table's values and state arrays; the hashed
// table's HashedRows::bytes(), index included) and resident (this
// process's growth from /proc/self/statm while each table was made or
// filled), with their ratio. The targets a hashed table is held to are
// printed with the result: at least 0.6x the dense ids/s, at most 1.3x its
// bytes per row. Check: afterwards every row the last repetition's pushes reached
// must read the same, bit for bit, from both tables (the same pushes from
// the same start), or the run fails before printing.
#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "benchmarks/machine.h"
#include "client/id_dedup.h"
#include "common/options.h"
#include "common/update_rule.h"
#include "common/wire.h"
#include "store/hashed_rows.h"
#include "store/shard_store.h"
#include "store/split_mix.h"

namespace {

using Clock = std::chrono::steady_clock;

// The same rows behind absl::flat_hash_map: packed rows, the last moved
// into an erased one's place, as HashedRows does.
class AbslRows {
 public:
  AbslRows(uint32_t dim, const ps::InitOptions& init) : dim_(dim), init_(init) {}
  const float* Find(uint64_t id) const {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : &rows_[size_t{it->second} * dim_];
  }
  float* FindOrMake(uint64_t id) {
    auto [it, made] = index_.try_emplace(id, static_cast<uint32_t>(ids_.size()));
    if (made) {
      ids_.push_back(id);
      rows_.resize(rows_.size() + dim_);
      for (uint32_t c = 0; c < dim_; ++c) rows_[size_t{it->second} * dim_ + c] = ps::InitialValue(init_, id, c);
    }
    return &rows_[size_t{it->second} * dim_];
  }
  void Erase(uint64_t id) {
    auto it = index_.find(id);
    if (it == index_.end()) return;
    const uint32_t r = it->second;
    index_.erase(it);
    const size_t last = ids_.size() - 1;
    if (r != last) {
      std::memcpy(&rows_[size_t{r} * dim_], &rows_[last * dim_], dim_ * sizeof(float));
      ids_[r] = ids_[last];
      index_[ids_[r]] = r;
    }
    ids_.pop_back();
    rows_.resize(rows_.size() - dim_);
  }
  void Gather(const std::vector<uint64_t>& ids, float* out) const {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (const float* row = Find(ids[i]); row != nullptr) {
        std::memcpy(out + i * dim_, row, dim_ * sizeof(float));
      } else {
        for (uint32_t c = 0; c < dim_; ++c) out[i * dim_ + c] = ps::InitialValue(init_, ids[i], c);
      }
    }
  }
  void Apply(const std::vector<uint64_t>& ids, const float* grads, const ps::UpdateRule& rule,
             const ps::OptimizerOptions& optimizer) {
    ps::FlushSubnormals flush;
    saved_.resize(dim_);
    for (size_t i = 0; i < ids.size(); ++i) {
      float* row = FindOrMake(ids[i]);
      // As HashedRows::Apply under on_non_finite_result: refuse.
      std::memcpy(saved_.data(), row, dim_ * sizeof(float));
      rule.apply(optimizer, row, {}, grads + i * dim_, dim_, optimizer.lr, 1);
      if (!ps::AllFinite(row, dim_)) std::memcpy(row, saved_.data(), dim_ * sizeof(float));
    }
  }

 private:
  const uint32_t dim_;
  const ps::InitOptions init_;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  std::vector<uint64_t> ids_;
  std::vector<float> rows_;
  std::vector<float> saved_;
};

template <typename F>
double MedianSeconds(int reps, F f) {
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    f(r);
    s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

// Resident bytes of this process.
uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Fills a table of `dim` values under `kind` with `rows` rows in a child
// process; returns {resident bytes per row, bytes() per row, row_bytes()}.
struct RowMemory {
  double resident = 0, counted = 0, formula = 0;
};
RowMemory MeasureRowMemory(uint32_t dim, ps::OptimizerKind kind, uint64_t rows) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ps::OptimizerOptions optimizer;
    optimizer.kind = kind;
    const ps::UpdateRule& rule = *ps::FindRule(kind);
    ps::InitOptions init;
    init.kind = ps::InitKind::kUniform;
    init.value = 0.05f;
    constexpr size_t kBatch = 4096;
    std::vector<uint64_t> ids(kBatch);
    std::vector<float> grads(kBatch * dim, 0.001f);
    std::mt19937_64 rng(7);
    const uint64_t before = ResidentBytes();
    RowMemory m;
    {
      ps::HashedRows table(dim, optimizer.Slots(), init, rows);
      for (uint64_t done = 0; done < rows; done += kBatch) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kBatch, rows - done));
        for (size_t i = 0; i < n; ++i) ids[i] = rng();
        table.Apply({ids.data(), n}, grads.data(), rule, optimizer, optimizer.lr, 1, true);
      }
      m.resident = static_cast<double>(ResidentBytes() - before) / static_cast<double>(table.size());
      m.counted = static_cast<double>(table.bytes()) / static_cast<double>(table.size());
      m.formula = static_cast<double>(table.row_bytes());
    }
    const ssize_t written = write(fds[1], &m, sizeof(m));
    _exit(written == sizeof(m) ? 0 : 1);
  }
  close(fds[1]);
  RowMemory m;
  if (read(fds[0], &m, sizeof(m)) != sizeof(m)) m = {};
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return m;
}

int RunMemory(uint64_t rows) {
  std::printf("hashed_rows_bench --memory: bytes per row of a table filled with %llu rows\n\n",
              static_cast<unsigned long long>(rows));
  std::printf("| dim | optimizer | state arrays | resident B/row | counted B/row | row_bytes() |\n"
              "|---|---|---|---|---|---|\n");
  const std::pair<ps::OptimizerKind, const char*> optimizers[] = {
      {ps::OptimizerKind::kSgd, "sgd"},
      {ps::OptimizerKind::kAdagrad, "adagrad"},
      {ps::OptimizerKind::kAdam, "adam"},
  };
  for (uint32_t dim : {8u, 16u, 64u}) {
    for (const auto& [kind, name] : optimizers) {
      ps::OptimizerOptions o;
      o.kind = kind;
      const RowMemory m = MeasureRowMemory(dim, kind, rows);
      std::printf("| %u | %s | %u | %.0f | %.0f | %.0f |\n", dim, name, o.Slots(), m.resident,
                  m.counted, m.formula);
    }
  }
  return 0;
}

// Pushes `pushes` batches of `batch` new ids into `table` (clock 1 + p for
// push p, or `clock` when set), timing each; sorted seconds.
std::vector<double> TimePushes(ps::HashedRows& table, size_t pushes, uint32_t batch, uint64_t seed,
                               int64_t clock = -1) {
  ps::OptimizerOptions adagrad;
  adagrad.kind = ps::OptimizerKind::kAdagrad;
  adagrad.lr = 0.05f;
  const ps::UpdateRule& rule = *ps::FindRule(adagrad.kind);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> ids(batch);
  std::vector<float> grads(size_t{batch} * table.dim(), 0.001f);
  std::vector<double> seconds;
  for (size_t p = 0; p < pushes; ++p) {
    for (uint64_t& id : ids) id = rng();
    const auto start = std::chrono::steady_clock::now();
    table.Apply(ids, grads.data(), rule, adagrad, adagrad.lr, 1, true,
                clock >= 0 ? clock : static_cast<int64_t>(1 + p));
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds;
}

int RunEvict(uint64_t rows, uint32_t dim, uint32_t batch, size_t pushes) {
  ps::InitOptions init;
  init.kind = ps::InitKind::kUniform;
  init.value = 0.05f;
  struct Case {
    const char* name;
    ps::EvictOptions evict;
    uint64_t max_rows;
    int64_t clock;  // of the timed pushes; -1: one clock each
  };
  ps::EvictOptions none, lru, lfu, idle;
  lru.policy = ps::EvictPolicy::kLru;
  lfu.policy = ps::EvictPolicy::kLfu;
  idle.idle_clocks = 1;
  const uint64_t room = rows + (pushes + 1) * batch;
  const Case cases[] = {{"room, no evict", none, room, -1},
                        {"room, evict: lru (uses kept)", lru, room, -1},
                        {"lru at the bound", lru, rows, -1},
                        {"lfu at the bound", lfu, rows, -1},
                        {"every row idle", idle, room, 1000}};
  std::printf("hashed_rows_bench --evict: %llu rows of dim %u (adagrad), %zu pushes of %u new ids "
              "each\n\n",
              static_cast<unsigned long long>(rows), dim, pushes, batch);
  std::printf("| table | median ms/push | p99 ms | longest ms | median / room's | rows evicted |\n"
              "|---|---|---|---|---|---|\n");
  double baseline = 0;
  for (const Case& c : cases) {
    ps::HashedRows table(dim, 1, init, c.max_rows, c.evict);
    // Filled at clock 0 (its index grown to its size), then timed.
    TimePushes(table, (rows + batch - 1) / batch, batch, 1, 0);
    const uint64_t filled = table.size();
    const std::vector<double> s = TimePushes(table, pushes, batch, 2, c.clock);
    const uint64_t evicted = filled + pushes * batch - table.size();
    const double median = s[s.size() / 2];
    if (baseline == 0) baseline = median;
    std::printf("| %s | %.3f | %.3f | %.3f | %.2f | %llu |\n", c.name, median * 1e3,
                s[std::min(s.size() - 1, s.size() * 99 / 100)] * 1e3, s.back() * 1e3,
                median / baseline, static_cast<unsigned long long>(evicted));
  }
  return 0;
}

// A job of one shard that holds `table` alone.
ps::JobOptions OneTableJob(ps::TableOptions table) {
  ps::JobOptions job;
  job.cluster.servers = {"127.0.0.1:7000"};
  job.cluster.workers = 1;
  job.tables = {std::move(table)};
  return job;
}

// Draws from a Zipf law over 1..n (rank k has weight 1 / k^exponent) by a
// binary search of its cumulative weights (n doubles).
class ZipfDraws {
 public:
  ZipfDraws(uint64_t n, double exponent) : cumulative_(n) {
    double total = 0;
    for (uint64_t k = 0; k < n; ++k) {
      total += std::pow(static_cast<double>(k + 1), -exponent);
      cumulative_[k] = total;
    }
  }
  uint64_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0.0, cumulative_.back())(rng);
    const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
    return std::min<uint64_t>(cumulative_.size(), static_cast<uint64_t>(it - cumulative_.begin()) + 1);
  }

 private:
  std::vector<double> cumulative_;
};

// One batch as the client sends it: each id once, its rows summed.
struct IdBatch {
  std::vector<uint64_t> rows;  // the dense table's ids
  std::vector<uint64_t> ids;   // the hashed table's: SplitMix(row)
  std::vector<float> grads;    // rows.size() x dim
};

// A PULL (values empty) or PUSH of table 0 naming `keys`, as DecodeRequest
// leaves it.
ps::Request RowsRequest(ps::Op op, std::span<const uint64_t> keys, std::span<const float> values,
                        uint32_t dim) {
  ps::Request r;
  r.header.op = op;
  r.header.table = 0;
  r.header.count = keys.size();
  r.header.dim = dim;
  r.keys = keys;
  r.values = values;
  return r;
}

int RunVsDense(uint64_t rows, uint32_t dim, uint32_t batch, int reps, uint32_t batches,
               double zipf) {
  ps::TableOptions table;
  table.dim = dim;
  table.init.kind = ps::InitKind::kConstant;
  table.init.value = 0.01f;
  table.optimizer.kind = ps::OptimizerKind::kAdagrad;
  table.optimizer.lr = 0.05f;
  ps::TableOptions dense_table = table;
  dense_table.name = "dense";
  dense_table.rows = rows;
  ps::TableOptions hashed_table = table;
  hashed_table.name = "hashed";
  hashed_table.keys = ps::KeyKind::kHashed;
  hashed_table.max_rows = rows;
  const ps::JobOptions dense_job = OneTableJob(dense_table);
  const ps::JobOptions hashed_job = OneTableJob(hashed_table);
  for (const ps::JobOptions* job : {&dense_job, &hashed_job}) {
    if (ps::Status s = job->Validate(); !s.ok()) {
      std::fprintf(stderr, "hashed_rows_bench: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const uint32_t slots = table.optimizer.Slots();
  const std::string load_before = ps::LoadAverage();

  // Each table made (the dense one: every row; the hashed one: a push of
  // zero gradients per row, in the order of the rows), its resident growth
  // measured around it.
  std::vector<uint64_t> fill_ids(batch);
  const std::vector<float> zeros(size_t{batch} * dim, 0.0f);
  uint64_t before = ResidentBytes();
  auto dense = ps::ShardStore::Create(dense_job, 0);
  if (!dense.ok()) {
    std::fprintf(stderr, "hashed_rows_bench: %s\n", dense.status().ToString().c_str());
    return 1;
  }
  const double dense_resident = static_cast<double>(ResidentBytes() - before);
  before = ResidentBytes();
  auto hashed = ps::ShardStore::Create(hashed_job, 0);
  if (!hashed.ok()) {
    std::fprintf(stderr, "hashed_rows_bench: %s\n", hashed.status().ToString().c_str());
    return 1;
  }
  int64_t clock = 0;
  for (uint64_t first = 0; first < rows; first += batch) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(batch, rows - first));
    for (size_t i = 0; i < n; ++i) fill_ids[i] = ps::SplitMix(first + i);
    const ps::Request push = RowsRequest(ps::Op::kPush, {fill_ids.data(), n},
                                         {zeros.data(), n * dim}, dim);
    if (ps::Status s = (*hashed)->ApplyPush(push, clock); !s.ok()) {
      std::fprintf(stderr, "hashed_rows_bench: filling: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const double hashed_resident = static_cast<double>(ResidentBytes() - before);
  if ((*hashed)->stored_rows(0) != rows) {
    std::fprintf(stderr, "hashed_rows_bench: the hashed table holds %llu rows, not %llu\n",
                 static_cast<unsigned long long>((*hashed)->stored_rows(0)),
                 static_cast<unsigned long long>(rows));
    return 1;
  }
  const double dense_counted = static_cast<double>(rows) * dim * sizeof(float) * (1 + slots);
  const double hashed_counted = static_cast<double>((*hashed)->stored_bytes(0));

  // Rank k (1 .. rows) lies on row k - 1, or on row (k - 1) * kSpread mod
  // rows: a prime above 2^28 (the most --rows allows), so a bijection.
  constexpr uint64_t kSpread = 2654435761ull;
  struct Placement {
    const char* name;
    bool spread;
  };
  const Placement placements[] = {{"together", false}, {"spread", true}};
  struct Result {
    std::vector<double> dense_pull, hashed_pull, dense_push, hashed_push;  // ids/s per repetition
    uint64_t ids = 0, draws = 0;
  };
  Result results[2];
  const ZipfDraws sampler(rows, zipf);
  ps::IdDedup dedup;
  std::vector<float> draw_grads(size_t{batch} * dim);
  std::vector<uint64_t> draw_rows(batch);
  std::vector<ps::Frame> frames;
  bool failed = false;
  auto fail = [&](const char* what, const ps::Status& s) {
    if (!failed) std::fprintf(stderr, "hashed_rows_bench: %s: %s\n", what, s.ToString().c_str());
    failed = true;
  };
  for (size_t p = 0; p < 2; ++p) {
    Result& result = results[p];
    std::vector<IdBatch> work(batches);
    for (int rep = 0; rep < reps && !failed; ++rep) {
      // This repetition's batches, drawn and summed untimed.
      std::mt19937_64 rng(1000 * p + static_cast<uint64_t>(rep));
      uint64_t ids = 0;
      for (IdBatch& b : work) {
        for (uint32_t i = 0; i < batch; ++i) {
          const uint64_t rank = sampler(rng) - 1;
          draw_rows[i] = placements[p].spread ? rank * kSpread % rows : rank;
          for (uint32_t c = 0; c < dim; ++c) {
            draw_grads[size_t{i} * dim + c] =
                std::uniform_real_distribution<float>(-0.005f, 0.005f)(rng);
          }
        }
        if (!dedup.SumDuplicates(draw_rows, draw_grads.data(), dim, &b.rows, &b.grads)) {
          b.rows = draw_rows;
          b.grads = draw_grads;
        }
        b.ids.resize(b.rows.size());
        for (size_t i = 0; i < b.rows.size(); ++i) b.ids[i] = ps::SplitMix(b.rows[i]);
        ids += b.rows.size();
      }
      result.ids += ids;
      result.draws += uint64_t{batches} * batch;
      auto pull = [&](ps::ShardStore& store, bool by_id) {
        const auto start = Clock::now();
        for (const IdBatch& b : work) {
          frames.clear();
          const ps::Request r = RowsRequest(ps::Op::kPull, by_id ? b.ids : b.rows, {}, dim);
          if (ps::Status s = store.ReadRows(r, &frames); !s.ok()) fail("pull", s);
        }
        frames.clear();
        return static_cast<double>(ids) /
               std::chrono::duration<double>(Clock::now() - start).count();
      };
      auto push = [&](ps::ShardStore& store, bool by_id, int64_t first_clock) {
        const auto start = Clock::now();
        int64_t c = first_clock;
        for (const IdBatch& b : work) {
          const ps::Request r = RowsRequest(ps::Op::kPush, by_id ? b.ids : b.rows, b.grads, dim);
          if (ps::Status s = store.ApplyPush(r, c++); !s.ok()) fail("push", s);
        }
        return static_cast<double>(ids) /
               std::chrono::duration<double>(Clock::now() - start).count();
      };
      // Both tables take the same pushes at the same clocks; which goes
      // first alternates.
      if (rep % 2 == 0) {
        result.dense_pull.push_back(pull(**dense, false));
        result.hashed_pull.push_back(pull(**hashed, true));
        result.dense_push.push_back(push(**dense, false, clock));
        result.hashed_push.push_back(push(**hashed, true, clock));
      } else {
        result.hashed_pull.push_back(pull(**hashed, true));
        result.dense_pull.push_back(pull(**dense, false));
        result.hashed_push.push_back(push(**hashed, true, clock));
        result.dense_push.push_back(push(**dense, false, clock));
      }
      clock += batches;
    }
    // Check: the rows these pushes reached read alike from both tables.
    std::vector<ps::Frame> dense_frames, hashed_frames;
    for (const IdBatch& b : work) {
      if (failed) break;
      dense_frames.clear();
      hashed_frames.clear();
      ps::Status sd = (*dense)->ReadRows(RowsRequest(ps::Op::kPull, b.rows, {}, dim), &dense_frames);
      ps::Status sh = (*hashed)->ReadRows(RowsRequest(ps::Op::kPull, b.ids, {}, dim), &hashed_frames);
      if (!sd.ok() || !sh.ok()) {
        fail("check", sd.ok() ? sh : sd);
        break;
      }
      const size_t n = b.rows.size() * dim * sizeof(float);
      if (dense_frames.size() != 1 || hashed_frames.size() != 1 || dense_frames[0].size() != n ||
          hashed_frames[0].size() != n ||
          std::memcmp(dense_frames[0].data(), hashed_frames[0].data(), n) != 0) {
        std::fprintf(stderr,
                     "hashed_rows_bench: the dense and the hashed table read differently after "
                     "the same pushes (%s)\n",
                     placements[p].name);
        failed = true;
      }
    }
  }
  if (failed) return 1;

  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto ratios = [](const std::vector<double>& hashed_v, const std::vector<double>& dense_v) {
    std::vector<double> r;
    for (size_t i = 0; i < hashed_v.size(); ++i) r.push_back(hashed_v[i] / dense_v[i]);
    return r;
  };
  std::printf("hashed_rows_bench --vs-dense: %llu rows of dim %u under adagrad (values + %u state "
              "array), batches of %u Zipf(%.2f) draws summed to distinct ids, %u batches per "
              "repetition, median of %d; load %s before, %s after\n\n",
              static_cast<unsigned long long>(rows), dim, slots, batch, zipf, batches, reps,
              load_before.c_str(), ps::LoadAverage().c_str());
  std::printf("| hot rows | step | distinct ids per batch | dense M ids/s | hashed M ids/s | "
              "hashed / dense | each repetition |\n|---|---|---|---|---|---|---|\n");
  double worst = 1e9;
  for (size_t p = 0; p < 2; ++p) {
    const Result& r = results[p];
    const double distinct = static_cast<double>(r.ids) / (static_cast<double>(r.draws) / batch);
    const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>>
        steps[] = {{"pull", {&r.dense_pull, &r.hashed_pull}},
                   {"push", {&r.dense_push, &r.hashed_push}}};
    for (const auto& [step, v] : steps) {
      const std::vector<double> each = ratios(*v.second, *v.first);
      std::string list;
      for (double x : each) {
        char cell[16];
        std::snprintf(cell, sizeof cell, "%s%.2f", list.empty() ? "" : " / ", x);
        list += cell;
      }
      const double m = median(each);
      worst = std::min(worst, m);
      std::printf("| %s | %s | %.0f | %.2f | %.2f | %.2f | %s |\n", placements[p].name, step,
                  distinct, median(*v.first) / 1e6, median(*v.second) / 1e6, m, list.c_str());
    }
  }
  const double n = static_cast<double>(rows);
  std::printf("\n| bytes per row | dense | hashed | hashed / dense |\n|---|---|---|---|\n");
  std::printf("| counted (values, state, index) | %.1f | %.1f | %.2f |\n", dense_counted / n,
              hashed_counted / n, hashed_counted / dense_counted);
  std::printf("| resident (growth while made) | %.1f | %.1f | %.2f |\n", dense_resident / n,
              hashed_resident / n, hashed_resident / dense_resident);
  std::printf("\nhashed: %zu B/row at its index's fullest (half full), %.1f B/row now with an "
              "index of %.0f MiB for %llu rows\n",
              ps::HashedRows::RowBytes(dim, slots), hashed_counted / n,
              (hashed_counted - n * (8.0 + dim * sizeof(float) * (1 + slots))) / 1048576.0,
              static_cast<unsigned long long>(rows));
  const double bytes_ratio = hashed_counted / dense_counted;
  std::printf("targets: hashed / dense ids/s >= 0.6 (lowest median %.2f: %s); bytes per row <= "
              "1.3x (%.2f: %s)\n",
              worst, worst >= 0.6 ? "met" : "NOT met", bytes_ratio,
              bytes_ratio <= 1.3 ? "met" : "NOT met");
  std::printf("check: every row the last repetition's pushes reached reads the same from both "
              "tables\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hashed_rows_bench: hash-keyed rows, our index against absl::flat_hash_map"};
  uint64_t rows = 1000000;
  uint32_t dim = 16, batch = 4096;
  int reps = 21;
  bool quick = false;
  app.add_option("--rows", rows, "ids with rows")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 28));
  app.add_option("--dim", dim, "floats per row")->check(CLI::Range(1u, 4096u));
  app.add_option("--batch", batch, "ids per pull or push")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--reps", reps, "repetitions of each timed step (median)")->check(CLI::Range(1, 1000));
  app.add_flag("--quick", quick, "a small run for ctest: 20,000 rows, 5 repetitions");
  bool memory = false;
  app.add_flag("--memory", memory,
               "measure each row's memory (resident growth per row) for dims 8, 16, 64 under "
               "sgd, adagrad and adam instead of timing");
  bool evict = false;
  app.add_flag("--evict", evict,
               "time pushes of new ids into a table with room, at its bound (lru, lfu) and with "
               "every row idle, one by one, instead of comparing indexes");
  bool vs_dense = false;
  app.add_flag("--vs-dense", vs_dense,
               "pull and push Zipf batches of a hashed table against a dense range table of the "
               "same rows (adagrad) through ShardStore, instead of comparing indexes");
  uint32_t batches = 128;
  app.add_option("--batches", batches, "--vs-dense: batches per repetition")
      ->check(CLI::Range(1u, 100000u));
  double zipf = 1.1;
  app.add_option("--zipf", zipf, "--vs-dense: the Zipf law's exponent")
      ->check(CLI::Range(0.01, 10.0));
  CLI11_PARSE(app, argc, argv);
  if (memory) return RunMemory(quick ? 20000 : rows);
  if (vs_dense) {
    if (quick) return RunVsDense(20000, dim, 1024, 3, 8, zipf);
    return RunVsDense(rows, dim, batch, app.count("--reps") != 0 ? reps : 7, batches, zipf);
  }
  if (evict) return RunEvict(quick ? 20000 : rows, dim, quick ? 1024 : batch, quick ? 20 : 200);
  if (quick) {
    rows = 20000;
    reps = 5;
    batch = std::min<uint32_t>(batch, 1024);
  }
  batch = static_cast<uint32_t>(std::min<uint64_t>(batch, rows));

  ps::InitOptions init;
  init.kind = ps::InitKind::kUniform;
  init.value = 0.05f;
  ps::OptimizerOptions sgd;
  sgd.kind = ps::OptimizerKind::kSgd;
  sgd.lr = 0.01f;
  const ps::UpdateRule& rule = *ps::FindRule(ps::OptimizerKind::kSgd);

  std::mt19937_64 rng(42);
  std::vector<uint64_t> ids(rows);
  for (uint64_t& id : ids) id = rng();
  std::vector<float> grads(size_t{batch} * dim, 0.001f);
  std::vector<float> out(size_t{batch} * dim);

  ps::HashedRows ours(dim, 0, init, rows + size_t{batch} * (reps + 1));
  AbslRows absl(dim, init);
  for (size_t first = 0; first < ids.size(); first += batch) {
    const size_t n = std::min<size_t>(batch, ids.size() - first);
    std::vector<uint64_t> part(ids.begin() + first, ids.begin() + first + n);
    ours.Apply(part, grads.data(), rule, sgd, sgd.lr, 1, true);
    absl.Apply(part, grads.data(), rule, sgd);
  }
  // The batches of each repetition: distinct ids with rows, and ids without.
  std::vector<std::vector<uint64_t>> hits(reps), misses(reps);
  for (int r = 0; r < reps; ++r) {
    std::vector<uint64_t> pick = ids;
    std::shuffle(pick.begin(), pick.end(), rng);
    hits[r].assign(pick.begin(), pick.begin() + batch);
    for (uint32_t i = 0; i < batch; ++i) misses[r].push_back(rng() | 1);  // 2^-64 chance of a row
  }

  struct Row {
    const char* step;
    double ours_s, absl_s;
  };
  std::vector<Row> table;
  table.push_back({"gather", MedianSeconds(reps, [&](int r) { ours.Gather(hits[r], out.data()); }),
                   MedianSeconds(reps, [&](int r) { absl.Gather(hits[r], out.data()); })});
  table.push_back(
      {"apply", MedianSeconds(reps, [&](int r) { ours.Apply(hits[r], grads.data(), rule, sgd, sgd.lr, 1, true); }),
       MedianSeconds(reps, [&](int r) { absl.Apply(hits[r], grads.data(), rule, sgd); })});
  table.push_back({"miss", MedianSeconds(reps, [&](int r) { ours.Gather(misses[r], out.data()); }),
                   MedianSeconds(reps, [&](int r) { absl.Gather(misses[r], out.data()); })});
  table.push_back({"churn",
                   MedianSeconds(reps,
                                 [&](int r) {
                                   for (uint64_t id : hits[r]) ours.Erase(id);
                                   for (uint64_t id : misses[r]) ours.FindOrMake(id);
                                 }),
                   MedianSeconds(reps, [&](int r) {
                     for (uint64_t id : hits[r]) absl.Erase(id);
                     for (uint64_t id : misses[r]) absl.FindOrMake(id);
                   })});

  std::printf("hashed_rows_bench: %llu rows of dim %u, batches of %u ids, median of %d\n\n",
              static_cast<unsigned long long>(rows), dim, batch, reps);
  std::printf("| step | ours M ids/s | absl M ids/s | ours/absl |\n|---|---|---|---|\n");
  for (const Row& row : table) {
    const double n = row.step == std::string("churn") ? 2.0 * batch : batch;
    std::printf("| %s | %.1f | %.1f | %.2f |\n", row.step, n / row.ours_s / 1e6, n / row.absl_s / 1e6,
                row.absl_s / row.ours_s);
  }
  std::printf("\nours: %zu bytes per row at the index's fullest (%.1f MiB now for %llu rows)\n",
              ours.row_bytes(), ours.bytes() / 1048576.0,
              static_cast<unsigned long long>(ours.size()));
  return 0;
}
