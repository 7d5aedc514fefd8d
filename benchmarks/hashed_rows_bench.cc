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
#include "common/options.h"
#include "common/update_rule.h"
#include "store/hashed_rows.h"
#include "store/shard_store.h"

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
uint64_t ResidentBytes() { return ps::ResidentBytes(getpid()); }

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
  CLI11_PARSE(app, argc, argv);
  if (memory) return RunMemory(quick ? 20000 : rows);
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
