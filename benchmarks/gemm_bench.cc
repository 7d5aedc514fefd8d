// gemm_bench: SGEMM throughput of Backend::Gemm on every backend this
// machine has (cpu always, cuda when a device is present), in one run, so
// cuda / cpu is printed beside the figures.
//
// Workload: C = A * B for square n x n float32 matrices (no transposes,
// alpha 1, beta 0), n in --sizes (default 1024 2048 4096). Inputs are
// uniform in [-1, 1], uploaded once. Each cell runs one warm-up product,
// then repeats the product in groups of 4, each group ending with a 1-float
// Download so the time covers finished device work, until --min-seconds
// (default 0.5 s) have passed. GFLOP/s = 2 n^3 x repeats / seconds. After timing,
// 16 random entries of C are checked against a float64 dot product: a cell
// whose relative error exceeds 1e-3 fails the run (exit 1).
//
// Usage: gemm_bench [--sizes 1024 2048 4096] [--min-seconds 0.5] [--device auto|cpu|cuda]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/machine.h"
#include "worker/backend.h"
#include "worker/backend_factory.h"

namespace ps {
namespace {

struct Cell {
  double gflops = 0;
  double max_rel_error = 0;
};

StatusOr<Cell> Measure(Backend* backend, size_t n, double min_seconds, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(n * n), b(n * n);
  for (float& x : a) x = dist(*rng);
  for (float& x : b) x = dist(*rng);
  PS_ASSIGN_OR_RETURN(auto da, backend->Allocate(n * n));
  PS_ASSIGN_OR_RETURN(auto db, backend->Allocate(n * n));
  PS_ASSIGN_OR_RETURN(auto dc, backend->Allocate(n * n));
  PS_RETURN_IF_ERROR(backend->Upload(a.data(), a.size(), da.get()));
  PS_RETURN_IF_ERROR(backend->Upload(b.data(), b.size(), db.get()));
  float sink = 0;
  auto gemm = [&] {
    return backend->Gemm(Transpose::kNo, Transpose::kNo, n, n, n, 1.0f, *da, *db, 0.0f, dc.get());
  };
  PS_RETURN_IF_ERROR(gemm());
  PS_RETURN_IF_ERROR(backend->Download(*dc, &sink, 1));

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  size_t repeats = 0;
  double seconds = 0;
  do {
    PS_RETURN_IF_ERROR(gemm());
    ++repeats;
    // Sync after every 4th product only: a sync per product would add
    // launch latency to the device figures.
    if (repeats % 4 == 0) {
      PS_RETURN_IF_ERROR(backend->Download(*dc, &sink, 1));
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
  } while (repeats % 4 != 0 || seconds < min_seconds);

  Cell cell;
  cell.gflops = 2.0 * static_cast<double>(n) * n * n * static_cast<double>(repeats) / seconds / 1e9;
  std::vector<float> c(n * n);
  PS_RETURN_IF_ERROR(backend->Download(*dc, c.data(), c.size()));
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  for (int s = 0; s < 16; ++s) {
    const size_t i = pick(*rng), j = pick(*rng);
    double want = 0, scale = 0;
    for (size_t p = 0; p < n; ++p) {
      want += double{a[i * n + p]} * b[p * n + j];
      scale += std::abs(double{a[i * n + p]} * b[p * n + j]);
    }
    cell.max_rel_error = std::max(cell.max_rel_error, std::abs(c[i * n + j] - want) / scale);
  }
  return cell;
}

int Run(const std::vector<size_t>& sizes, double min_seconds, const std::string& device) {
  auto kind = ParseBackendKind(device);
  if (!kind.ok()) {
    std::fprintf(stderr, "gemm_bench: %s\n", kind.status().ToString().c_str());
    return 2;
  }
  std::vector<BackendKind> kinds;
  if (*kind == BackendKind::kAuto) {
    kinds.push_back(BackendKind::kCpu);
    if (CudaDeviceCount() > 0) kinds.push_back(BackendKind::kCuda);
  } else {
    kinds.push_back(*kind);
  }
  std::vector<std::unique_ptr<Backend>> backends;
  for (BackendKind k : kinds) {
    auto backend = CreateBackend(k);
    if (!backend.ok()) {
      std::fprintf(stderr, "gemm_bench: %s\n", backend.status().ToString().c_str());
      return 1;
    }
    backends.push_back(std::move(backend).value());
  }

  std::printf("gemm_bench: square SGEMM, C = A * B, float32; cpu: %s\n", CpuModel().c_str());
  for (const auto& b : backends) std::printf("  backend %s\n", b->name().c_str());
  std::printf("\n%8s", "n");
  for (BackendKind k : kinds) std::printf(" %12s", (BackendKindName(k) + " GFLOP/s").c_str());
  if (kinds.size() == 2) std::printf(" %10s", "cuda/cpu");
  std::printf("\n");

  std::mt19937 rng(12345);
  int rc = 0;
  for (size_t n : sizes) {
    std::printf("%8zu", n);
    std::vector<double> figures;
    for (auto& backend : backends) {
      auto cell = Measure(backend.get(), n, min_seconds, &rng);
      if (!cell.ok()) {
        std::printf(" %12s", "error");
        std::fprintf(stderr, "\ngemm_bench: %s n=%zu: %s\n", backend->name().c_str(), n,
                     cell.status().ToString().c_str());
        rc = 1;
        figures.push_back(0);
        continue;
      }
      if (cell->max_rel_error > 1e-3) {
        std::fprintf(stderr, "\ngemm_bench: %s n=%zu: wrong result, relative error %.3g\n",
                     backend->name().c_str(), n, cell->max_rel_error);
        rc = 1;
      }
      std::printf(" %12.1f", cell->gflops);
      figures.push_back(cell->gflops);
    }
    if (figures.size() == 2 && figures[0] > 0) std::printf(" %9.1fx", figures[1] / figures[0]);
    std::printf("\n");
    std::fflush(stdout);
  }
  return rc;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {1024, 2048, 4096};
  double min_seconds = 0.5;
  std::string device = "auto";
  CLI::App app{"SGEMM throughput of Backend::Gemm on every available backend"};
  app.add_option("--sizes", sizes, "square matrix sizes")->check(CLI::PositiveNumber);
  app.add_option("--min-seconds", min_seconds, "minimum timed seconds per cell");
  app.add_option("--device", device, "auto (every available backend), cpu or cuda");
  CLI11_PARSE(app, argc, argv);
  return ps::Run(sizes, min_seconds, device);
}
