// apply_bench: how fast the shard applies pushed gradients with each
// optimizer, against a plain y += a * x over arrays of the same size in the
// same run.
//
// Workload: one table of --floats values (default 16M = 2^24 floats, 64 MiB;
// dim 1, uniform init), one gradient of the same size with values in
// [-1, 1]. Optimizers: sgd (lr 0.01), sgd with momentum 0.9 (lr 0.01),
// adagrad (lr 0.01), adam (lr 0.001), add and ftrl (alpha 0.1, beta 1,
// l1 0.001). For each one, every
// repetition runs these paths once each, in this order (ours and the
// baselines alternate), all on this thread:
//   axpy loop      y += a * x, a plain loop over two arrays of --floats
//                  (built like the update loops: AVX2 and baseline x86-64,
//                  picked at load time)
//   kernel         ps::ApplyOptimizer (common/update_rule.h) on plain arrays
//                  w, slots (as many as the optimizer has) and g
//   ApplyPush      ps::ShardStore::ApplyPush of one dense PUSH of the whole
//                  table, decoded once beforehand with DecodeRequest from a
//                  header frame and a values frame that shares g (as the
//                  shard receives it: values read in place)
//   cblas_saxpy    OpenBLAS's saxpy over the same x and y, on one thread
//                  (openblas_set_num_threads(1): the shard applies on one)
//   decode+apply   DecodeRequest (header parse, checks, the NaN/Inf scan of
//                  the values) then ApplyPush: the shard thread's work for
//                  one push of the whole table
//   ... in parts   the same for the table pushed in parts of --part-floats
//                  (default 1 MiB, the client's push_part_bytes), one
//                  request each, as a client sends a large push
//   after pull     ApplyPush while a dense pull of the whole table still
//                  holds every block (its reply not yet sent): each block is
//                  copied first (copy-on-write), values and slots
//
// First touch: every array is allocated and written before anything is
// timed, and each path runs once untimed (which also writes every value and
// slot page); so the timed runs see steady state. The store is never pulled
// from except in "after pull", and its copy-on-write counter is checked to
// stay at 0 in every other path.
//
// Reported per optimizer: B/elem = bytes of memory each element touches
// (sgd and add: read g, read and write w = 12, the same as axpy; momentum
// and adagrad: + read and write one slot = 20; adam and ftrl: two slots =
// 28).
// GB/s = gradient bytes (4 x floats) per second, 10^9 bytes, median over the
// --reps repetitions (default 7). "/ axpy" = median over repetitions of
// (ours / the axpy loop of the same repetition). Memory GB/s = ApplyPush's
// GB/s x B/elem / 4, to hold against the axpy loop's (x 3).
//
// Check: afterwards the kernel's arrays, the store's values (CopyValues)
// and axpy's y are compared at sampled indices (both ends, block
// boundaries, spread in between) against the same steps computed in double
// precision from the same start (adam at the step t the store used: each
// push is applied at a clock of its own, t = clock + 1, the same for every
// part of a push), with a
// tolerance of 4e-6 x (1 + |value|). A mismatch prints the error and exits
// 1 before any number is printed. --quick (1,000,003 floats, 1 repetition)
// is the ctest smoke test; its numbers mean nothing. --optimizers runs a
// subset (for profiling one of them).

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <cblas.h>

#include "benchmarks/machine.h"
#include "common/options.h"
#include "common/status.h"
#include "common/update_rule.h"
#include "common/wire.h"
#include "store/shard_store.h"

namespace ps {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Block size of ShardStore (kBlockFloats in shard_store.cc), for the check's
// sampled indices only.
constexpr uint64_t kStoreBlockFloats = 256 * 1024;
constexpr float kAxpyA = 0.01f;

struct Config {
  uint64_t floats = uint64_t{1} << 24;
  int reps = 7;
  std::vector<std::string> optimizers = {"sgd", "momentum", "adagrad", "adam", "add", "ftrl"};
  uint64_t part_floats = kStoreBlockFloats;  // client.push_part_bytes' default, 1 MiB
};

struct Case {
  const char* name;   // for --optimizers
  const char* label;
  OptimizerOptions optimizer;
  int bytes_per_elem;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr = 0.01f;
  cases.push_back({"sgd", "sgd", o, 12});
  o.momentum = 0.9f;
  cases.push_back({"momentum", "sgd, momentum 0.9", o, 20});
  o = OptimizerOptions{};
  o.kind = OptimizerKind::kAdagrad;
  o.lr = 0.01f;
  cases.push_back({"adagrad", "adagrad", o, 20});
  o = OptimizerOptions{};
  o.kind = OptimizerKind::kAdam;
  o.lr = 0.001f;
  cases.push_back({"adam", "adam", o, 28});
  o = OptimizerOptions{};
  o.kind = OptimizerKind::kAdd;
  cases.push_back({"add", "add", o, 12});
  o = OptimizerOptions{};
  o.kind = OptimizerKind::kFtrl;
  o.l1 = 0.001f;
  cases.push_back({"ftrl", "ftrl, l1 0.001", o, 28});
  return cases;
}

[[gnu::target_clones("avx2", "default")]] void AxpyLoop(float* __restrict y,
                                                        const float* __restrict x, size_t n,
                                                        float a) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float Gradient(uint64_t i) {
  const uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull;
  return static_cast<float>(static_cast<int64_t>((h >> 40) % 2001) - 1000) / 1000.0f;
}

InitOptions TableInit() {
  InitOptions init;
  init.kind = InitKind::kUniform;
  init.value = 0.5f;
  init.seed = 7;
  return init;
}

// One element after one step of `o` at each adam step in `ts` (every other
// rule ignores them) with gradient g from w0, in double precision (adam in
// its textbook form with bias-corrected moments).
double Reference(const OptimizerOptions& o, double w0, double g, const std::vector<int64_t>& ts) {
  double w = w0, s0 = 0, s1 = 0;
  for (int64_t t : ts) {
    switch (o.kind) {
      case OptimizerKind::kAdd:
        w += g;
        break;
      case OptimizerKind::kSgd:
        if (o.momentum > 0) {
          s0 = o.momentum * s0 + g;
          w -= o.lr * s0;
        } else {
          w -= o.lr * g;
        }
        break;
      case OptimizerKind::kAdagrad:
        s0 += g * g;
        w -= o.lr * g / (std::sqrt(s0) + o.epsilon);
        break;
      case OptimizerKind::kAdam: {
        const double b1 = o.beta1, b2 = o.beta2;
        s0 = b1 * s0 + (1 - b1) * g;
        s1 = b2 * s1 + (1 - b2) * g * g;
        const double mhat = s0 / (1 - std::pow(b1, static_cast<double>(t)));
        const double vhat = s1 / (1 - std::pow(b2, static_cast<double>(t)));
        w -= o.lr * mhat / (std::sqrt(vhat) + o.epsilon);
        break;
      }
      case OptimizerKind::kFtrl: {
        // McMahan et al. 2013, Algorithm 1: s0 = z, s1 = n.
        const double sigma = (std::sqrt(s1 + g * g) - std::sqrt(s1)) / o.alpha;
        s0 += g - sigma * w;
        s1 += g * g;
        w = std::fabs(s0) <= o.l1 ? 0.0
                                  : -(s0 - std::copysign(double{o.l1}, s0)) /
                                        ((o.beta + std::sqrt(s1)) / o.alpha + o.l2);
        break;
      }
    }
  }
  return w;
}

std::vector<uint64_t> SampleIndices(uint64_t n) {
  std::vector<uint64_t> idx = {0, 1, n - 1, n / 2};
  for (uint64_t b = kStoreBlockFloats; b < n; b += kStoreBlockFloats) {
    idx.push_back(b - 1);
    idx.push_back(b);
  }
  for (uint64_t k = 0; k < 64; ++k) idx.push_back((k * 0x9e3779b97f4a7c15ull >> 11) % n);
  std::sort(idx.begin(), idx.end());
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  return idx;
}

// The pushes applied to a table, in order: [first, first + count) at adam
// step t (the clock the push was applied at, plus 1).
struct Applied {
  uint64_t first, count;
  int64_t t;
};

// Compares got[i] at the sampled indices with the steps `history` applied
// to element i.
Status Check(const char* what, const Case& c, const std::vector<float>& got,
             const std::vector<float>& w0, const std::vector<float>& g,
             const std::vector<Applied>& history) {
  for (uint64_t i : SampleIndices(got.size())) {
    std::vector<int64_t> ts;
    for (const Applied& a : history) {
      if (i >= a.first && i - a.first < a.count) ts.push_back(a.t);
    }
    const double want = Reference(c.optimizer, w0[i], g[i], ts);
    const double tol = 4e-6 * (1.0 + std::abs(want));
    if (!(std::abs(got[i] - want) <= tol)) {
      return DataLossError(std::string(c.label) + ": " + what + " element " + std::to_string(i) +
                           " is " + std::to_string(got[i]) + " after " + std::to_string(ts.size()) +
                           " steps, want " + std::to_string(want));
    }
  }
  return Status::Ok();
}

struct Row {
  const Case* c = nullptr;
  // GB/s, medians over repetitions.
  double kernel = 0, push = 0, axpy = 0, cblas = 0, decode = 0, parts = 0, after_pull = 0;
  // Medians of per-repetition ratios to the axpy loop.
  double kernel_r = 0, push_r = 0, cblas_r = 0, decode_r = 0, parts_r = 0, after_pull_r = 0;
  uint64_t copies_per_pull = 0;
  uint64_t num_parts = 0;
};

StatusOr<Row> RunCase(const Case& c, const Config& cfg) {
  const uint64_t n = cfg.floats;
  const double gbytes = 4.0 * static_cast<double>(n) / 1e9;
  const InitOptions init = TableInit();

  // The gradient (also the pushed values frames) and the starting table.
  std::vector<float> g(n), w0(n);
  for (uint64_t i = 0; i < n; ++i) {
    g[i] = Gradient(i);
    w0[i] = InitialValue(init, i, 0);
  }

  // Kernel arrays.
  std::vector<float> w = w0;
  std::vector<float> slot0(c.optimizer.Slots() > 0 ? n : 0, 0.0f);
  std::vector<float> slot1(c.optimizer.Slots() > 1 ? n : 0, 0.0f);
  std::vector<Applied> kernel_history;
  auto kernel = [&] {
    const auto t = static_cast<int64_t>(kernel_history.size()) + 1;
    ApplyOptimizer(c.optimizer, w.data(),
                   {slot0.empty() ? nullptr : slot0.data(), slot1.empty() ? nullptr : slot1.data()},
                   g.data(), n, c.optimizer.lr, t);
    kernel_history.push_back({0, n, t});
  };

  // Axpy arrays.
  std::vector<float> x = g, y = w0;
  int axpy_steps = 0;
  auto axpy_loop = [&] {
    AxpyLoop(y.data(), x.data(), n, kAxpyA);
    ++axpy_steps;
  };
  auto axpy_blas = [&] {
    cblas_saxpy(static_cast<blasint>(n), kAxpyA, x.data(), 1, y.data(), 1);
    ++axpy_steps;
  };

  // The store: one shard, one table.
  JobOptions job;
  job.cluster.servers = {"127.0.0.1:7000"};
  job.cluster.workers = 1;
  TableOptions t;
  t.name = "w";
  t.rows = n;
  t.dim = 1;
  t.init = init;
  t.optimizer = c.optimizer;
  job.tables = {t};
  PS_RETURN_IF_ERROR(job.Validate());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::Create(job, 0));
  std::vector<Applied> store_history;
  const RequestRules rules{0, store->layouts(), 1, UINT64_MAX, UINT64_MAX, true};

  // A push as the shard receives it: a header frame and a values frame
  // (here sharing g, read in place). One of the whole table, and the same
  // in parts of --part-floats as a client sends it.
  auto push_frames = [&](uint64_t first, uint64_t count) {
    MessageHeader h;
    h.op = Op::kPush;
    h.worker = 0;
    h.clock = 0;
    h.table = 0;
    h.count = count;
    h.dim = 1;
    h.flags = kFlagDenseRange;
    h.first_row = first;
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    frames.push_back(
        Frame::Share(g.data() + first, count * sizeof(float), std::shared_ptr<const void>())
            .value());
    return frames;
  };
  std::vector<Frame> whole = push_frames(0, n);
  std::vector<std::vector<Frame>> parts;
  for (uint64_t first = 0; first < n; first += cfg.part_floats) {
    parts.push_back(push_frames(first, std::min(cfg.part_floats, n - first)));
  }
  Request push;
  PS_RETURN_IF_ERROR(DecodeRequest(whole, rules, &push));
  if (push.values.data() != g.data()) {
    return InternalError("DecodeRequest copied the values instead of reading them in place");
  }
  // Every push (whole, or all of its parts) is applied at a clock of its own.
  int64_t clock = 0;
  auto record = [&](const Request& r) {
    store_history.push_back({r.header.first_row, r.header.count, clock + 1});
  };
  auto apply = [&] {
    store->ApplyPush(push, clock).IgnoreError();  // the check below sees a refusal
    record(push);
    ++clock;
  };
  Request decoded;
  Status decode_status = Status::Ok();
  auto decode_apply = [&](std::vector<Frame>& frames) {
    Status s = DecodeRequest(frames, rules, &decoded);
    if (!s.ok()) {
      decode_status = s;
      return;
    }
    store->ApplyPush(decoded, clock).IgnoreError();
    record(decoded);
  };
  auto decode_apply_whole = [&] {
    decode_apply(whole);
    ++clock;
  };
  auto decode_apply_parts = [&] {
    for (std::vector<Frame>& p : parts) decode_apply(p);
    ++clock;
  };
  Request pull;
  pull.header = push.header;
  pull.header.op = Op::kPull;
  uint64_t copies = 0;
  // Times ApplyPush while a pull of the whole table holds every block.
  auto after_pull = [&]() -> StatusOr<double> {
    std::vector<Frame> frames;
    PS_RETURN_IF_ERROR(store->ReadRows(pull, &frames));
    const uint64_t before = store->copy_on_write_count();
    const double s = Time(apply);
    copies = store->copy_on_write_count() - before;
    return s;  // frames (and the blocks they kept) are dropped here
  };

  // Untimed first pass of every path: faults in whatever was not yet
  // written (slot pages, the copy-on-write path's allocations).
  axpy_loop();
  kernel();
  apply();
  axpy_blas();
  decode_apply_whole();
  decode_apply_parts();
  PS_RETURN_IF_ERROR(after_pull().status());
  PS_RETURN_IF_ERROR(decode_status);
  if (store->copy_on_write_count() != copies) {
    return InternalError("copy-on-write outside the after-pull path");
  }

  std::vector<double> t_axpy, t_kernel, t_push, t_blas, t_decode, t_parts, t_pull;
  for (int r = 0; r < cfg.reps; ++r) {
    const uint64_t cow_before = store->copy_on_write_count();
    t_axpy.push_back(Time(axpy_loop));
    t_kernel.push_back(Time(kernel));
    t_push.push_back(Time(apply));
    t_blas.push_back(Time(axpy_blas));
    t_decode.push_back(Time(decode_apply_whole));
    t_parts.push_back(Time(decode_apply_parts));
    PS_RETURN_IF_ERROR(decode_status);
    if (store->copy_on_write_count() != cow_before) {
      return InternalError("a push copied blocks that no pull held");
    }
    PS_ASSIGN_OR_RETURN(double s, after_pull());
    t_pull.push_back(s);
  }

  // Check every path's result.
  PS_RETURN_IF_ERROR(Check("kernel", c, w, w0, g, kernel_history));
  PS_RETURN_IF_ERROR(Check("ShardStore", c, store->CopyValues(0), w0, g, store_history));
  for (uint64_t i : SampleIndices(n)) {
    const double want = w0[i] + axpy_steps * static_cast<double>(kAxpyA) * g[i];
    if (!(std::abs(y[i] - want) <= 4e-6 * (1.0 + std::abs(want)))) {
      return DataLossError(std::string("axpy element ") + std::to_string(i) + " is " +
                           std::to_string(y[i]) + ", want " + std::to_string(want));
    }
  }

  Row row;
  row.c = &c;
  row.copies_per_pull = copies;
  row.num_parts = parts.size();
  auto gbs = [&](const std::vector<double>& ts) {
    std::vector<double> v;
    for (double sec : ts) v.push_back(gbytes / sec);
    return Median(v);
  };
  // Median of (ours / axpy loop of the same repetition) in GB/s.
  auto ratio = [&](const std::vector<double>& ts) {
    std::vector<double> v;
    for (size_t i = 0; i < ts.size(); ++i) v.push_back(t_axpy[i] / ts[i]);
    return Median(v);
  };
  row.kernel = gbs(t_kernel);
  row.push = gbs(t_push);
  row.axpy = gbs(t_axpy);
  row.cblas = gbs(t_blas);
  row.decode = gbs(t_decode);
  row.parts = gbs(t_parts);
  row.after_pull = gbs(t_pull);
  row.kernel_r = ratio(t_kernel);
  row.push_r = ratio(t_push);
  row.cblas_r = ratio(t_blas);
  row.decode_r = ratio(t_decode);
  row.parts_r = ratio(t_parts);
  row.after_pull_r = ratio(t_pull);
  return row;
}

Status RunAll(const Config& cfg) {
  openblas_set_num_threads(1);
  const auto began = SteadyClock::now();
  std::vector<Case> cases = Cases();
  std::vector<Row> rows;
  for (const Case& c : cases) {
    if (std::find(cfg.optimizers.begin(), cfg.optimizers.end(), c.name) == cfg.optimizers.end()) {
      continue;
    }
    std::fprintf(stderr, "apply_bench: %s ...\n", c.label);
    PS_ASSIGN_OR_RETURN(Row row, RunCase(c, cfg));
    rows.push_back(row);
  }
  const double total = std::chrono::duration<double>(SteadyClock::now() - began).count();
  if (rows.empty()) return InvalidArgumentError("no optimizer selected");

  std::printf("# apply_bench: server apply rate per optimizer against y += a * x\n\n");
  std::printf(
      "%u hardware threads, CPU %s (AVX2: %s). Table of %" PRIu64
      " floats (%.1f MiB, dim 1), one thread; %d repetition(s), every path once per "
      "repetition in turn; %.0f s in all. OpenBLAS: %s, 1 thread.\n\n",
      std::thread::hardware_concurrency(), CpuModel().c_str(),
      __builtin_cpu_supports("avx2") ? "yes" : "no", cfg.floats,
      4.0 * static_cast<double>(cfg.floats) / (1 << 20), cfg.reps, total, openblas_get_config());
  std::printf(
      "GB/s = gradient bytes (4 per element, 10^9 B) per second, median over repetitions; "
      "/ axpy = median of the per-repetition ratios to the axpy loop. B/elem = memory bytes "
      "each element touches; memory GB/s = GB/s x B/elem / 4 (axpy: x 3).\n\n");
  std::printf(
      "| optimizer | B/elem | kernel GB/s | ApplyPush GB/s | axpy loop GB/s | cblas_saxpy GB/s "
      "| kernel / axpy | ApplyPush / axpy | cblas / axpy | ApplyPush memory GB/s | axpy memory "
      "GB/s |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f |\n",
                r.c->label, r.c->bytes_per_elem, r.kernel, r.push, r.axpy, r.cblas, r.kernel_r,
                r.push_r, r.cblas_r, r.push * r.c->bytes_per_elem / 4.0, r.axpy * 3.0);
  }
  std::printf(
      "\nThe shard's work per push, same repetitions: decode+apply = DecodeRequest (with the "
      "NaN/Inf scan) then ApplyPush, of one push of the whole table and of %" PRIu64
      " pushes of %" PRIu64
      " floats (a client's parts); after pull = ApplyPush while a pull reply still holds "
      "every block (%" PRIu64 " blocks copied per push).\n\n",
      rows[0].num_parts, std::min(cfg.part_floats, cfg.floats), rows[0].copies_per_pull);
  std::printf(
      "| optimizer | decode+apply GB/s | / axpy | decode+apply in parts GB/s | / axpy | after "
      "pull GB/s | / axpy |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r.c->label, r.decode,
                r.decode_r, r.parts, r.parts_r, r.after_pull, r.after_pull_r);
  }
  std::printf(
      "\nEvery path's result matched a double-precision reference at the sampled indices; "
      "no push copied a block outside the after-pull column.\n");
  return Status::Ok();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  CLI::App app{"Apply rate of the shard's optimizers against y += a * x"};
  bool quick = false;
  ps::Config cfg;
  app.add_flag("--quick", quick,
               "Smoke test: 1,000,003 floats, 1 repetition (unless --floats/--reps are given)");
  app.add_option("--floats", cfg.floats, "Table size in floats (default 16M = 2^24)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 31));
  app.add_option("--reps", cfg.reps, "Repetitions (GB/s: the median)")->check(CLI::Range(1, 1000));
  app.add_option("--optimizers", cfg.optimizers,
                 "Optimizers to run (default all): sgd, momentum, adagrad, adam, add, ftrl")
      ->delimiter(',')
      ->check(CLI::IsMember({"sgd", "momentum", "adagrad", "adam", "add", "ftrl"}));
  app.add_option("--part-floats", cfg.part_floats,
                 "Floats per push in the parts column (default 262144: 1 MiB, the client's "
                 "default push_part_bytes)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 31));
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    if (app.count("--floats") == 0) cfg.floats = 1000003;
    if (app.count("--reps") == 0) cfg.reps = 1;
  }
  ps::Status s = ps::RunAll(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "apply_bench: FAILED: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
