// hashed_vs_dense_bench: a hashed table (keys: hashed) beside a dense range
// table of the same rows, through the shard's own store (ShardStore::ReadRows and
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
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include "benchmarks/machine.h"
#include "client/id_dedup.h"
#include "common/options.h"
#include "common/wire.h"
#include "store/shard_store.h"
#include "store/split_mix.h"

namespace {

using Clock = std::chrono::steady_clock;

uint64_t ResidentBytes() { return ps::ResidentBytes(getpid()); }

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
  std::printf("hashed_vs_dense_bench: %llu rows of dim %u under adagrad (values + %u state "
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
  std::printf("\nhashed: %zu B/row at its index's fullest (7/8 full), %.1f B/row now with an "
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
  CLI::App app{"hashed_vs_dense_bench: a hashed table against a dense range table of the same "
               "rows, through the shard's store"};
  uint64_t rows = 1000000;
  uint32_t dim = 16, batch = 4096, batches = 128;
  int reps = 7;
  double zipf = 1.1;
  bool quick = false;
  app.add_option("--rows", rows, "rows of each table")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 28));
  app.add_option("--dim", dim, "floats per row")->check(CLI::Range(1u, 4096u));
  app.add_option("--batch", batch, "Zipf draws per pull or push")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--batches", batches, "batches per repetition")->check(CLI::Range(1u, 100000u));
  app.add_option("--reps", reps, "repetitions (median)")->check(CLI::Range(1, 1000));
  app.add_option("--zipf", zipf, "the Zipf law's exponent")->check(CLI::Range(0.01, 10.0));
  app.add_flag("--quick", quick, "a small run for ctest: 20,000 rows, 3 repetitions of 8 batches");
  CLI11_PARSE(app, argc, argv);
  if (quick) return RunVsDense(20000, dim, 1024, 3, 8, zipf);
  return RunVsDense(rows, dim, batch, reps, batches, zipf);
}
