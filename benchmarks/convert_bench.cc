// convert_bench: the wire conversions of common/wire_floats.h against a
// plain memcpy of the float32 bytes, side by side in one run.
//
// Workload: --floats values (default 4M = 2^22, 16 MiB of float32; about
// what one pull of the wide MLP's table is) drawn from a normal
// distribution (scale 0.05, like a model's weights), a few NaN and Inf
// among them. For each repetition (--reps, default 9) these run once each,
// in this order, on this thread, into buffers written before timing:
//   memcpy         the float32 bytes into another float32 array
//   to bf16        FloatsToBf16
//   from bf16      Bf16ToFloats
//   to fp16        FloatsToF16
//   from fp16      F16ToFloats
//   bf16 feedback  EncodeWithFeedback (bf16): add the residual, round, keep
//                  the new residual
//   fp16 feedback  the same in binary16 (its overflow check included)
// Each conversion runs twice a repetition: with the CPU's conversion
// instructions where it has them (F16C, AVX512-BF16: the default, what
// jobs run), then with the portable loops (SetConversionLoops).
// Reported: GB/s of float32 values (4 bytes x floats / seconds, 10^9), the
// median over repetitions, and "/ memcpy": the median over repetitions of
// the path's GB/s over memcpy's of the same repetition (the target: at
// least 0.8); then the same for the portable loops. Afterwards every value the conversions wrote is checked
// against the one-value functions; a mismatch exits 1. --quick (1,000,003
// floats, 1 repetition) is the ctest smoke test; its numbers mean nothing.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchmarks/machine.h"
#include "common/wire_floats.h"

namespace {

double Seconds(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wire conversions (bf16, fp16) against memcpy"};
  size_t floats = size_t{1} << 22;
  int reps = 9;
  bool quick = false;
  app.add_option("--floats", floats, "values per conversion")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "repetitions")->check(CLI::PositiveNumber);
  app.add_flag("--quick", quick, "1,000,003 floats, 1 repetition (smoke test)");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    floats = 1000003;
    reps = 1;
  }

  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> in(floats), copy(floats), back(floats), residual(floats, 0.0f);
  std::vector<uint16_t> half(floats);
  for (float& x : in) x = normal(gen);
  in[floats / 3] = std::numeric_limits<float>::quiet_NaN();
  in[floats / 2] = std::numeric_limits<float>::infinity();
  std::memset(copy.data(), 1, floats * sizeof(float));
  std::memset(back.data(), 1, floats * sizeof(float));
  std::memset(half.data(), 1, floats * sizeof(uint16_t));

  struct Path {
    const char* name;
    std::function<void()> run;
    std::vector<double> gbps[2], ratio[2];  // [0]: the CPU's instructions, [1]: portable
  };
  std::vector<Path> paths = {
      {"memcpy", [&] { std::memcpy(copy.data(), in.data(), floats * sizeof(float)); }, {}, {}},
      {"to bf16", [&] { ps::FloatsToBf16(in.data(), floats, half.data()); }, {}, {}},
      {"from bf16", [&] { ps::Bf16ToFloats(half.data(), floats, back.data()); }, {}, {}},
      {"to fp16", [&] { ps::FloatsToF16(in.data(), floats, half.data()); }, {}, {}},
      {"from fp16", [&] { ps::F16ToFloats(half.data(), floats, back.data()); }, {}, {}},
      {"bf16 feedback",
       [&] {
         (void)ps::EncodeWithFeedback(ps::WireType::kBf16, in, residual, half.data());
       },
       {},
       {}},
      {"fp16 feedback",
       [&] {
         (void)ps::EncodeWithFeedback(ps::WireType::kF16, in, residual, half.data());
       },
       {},
       {}},
  };
  const ps::ConversionLoops loops[2] = {ps::ConversionLoops::kInstructions,
                                        ps::ConversionLoops::kPortable};
  for (Path& p : paths) p.run();  // untimed: every page written
  const double bytes = 4.0 * static_cast<double>(floats);
  for (int r = 0; r < reps; ++r) {
    double memcpy_gbps = 0;
    for (Path& p : paths) {
      for (int l = 0; l < 2; ++l) {
        if (&p == &paths[0] && l == 1) break;  // memcpy runs once
        ps::SetConversionLoops(loops[l]);
        const double gbps = bytes / Seconds(p.run) / 1e9;
        if (&p == &paths[0]) memcpy_gbps = gbps;
        p.gbps[l].push_back(gbps);
        p.ratio[l].push_back(gbps / memcpy_gbps);
      }
    }
  }
  ps::SetConversionLoops(ps::ConversionLoops::kInstructions);

  // Check: each type's array conversions against its one-value functions.
  for (ps::WireType type : {ps::WireType::kBf16, ps::WireType::kF16}) {
    ps::EncodeFloats(type, in.data(), floats, half.data());
    ps::DecodeFloats(type, half.data(), floats, back.data());
    for (size_t i = 0; i < floats; ++i) {
      const float want = type == ps::WireType::kBf16 ? ps::Bf16ToFloat(ps::FloatToBf16(in[i]))
                                                     : ps::F16ToFloat(ps::FloatToF16(in[i]));
      if (std::memcmp(&back[i], &want, sizeof(float)) != 0) {
        std::fprintf(stderr, "convert_bench: %s value %zu: got %g, want %g\n",
                     ps::WireTypeName(type), i, back[i], want);
        return 1;
      }
    }
  }

  std::printf("convert_bench: %zu floats (%.1f MiB of float32), %d repetitions; cpu: %s\n",
              floats, bytes / (1 << 20), reps, ps::CpuModel().c_str());
  std::printf("%-14s %10s %10s %16s %16s\n", "path", "GB/s", "/ memcpy", "portable GB/s",
              "portable / memcpy");
  for (const Path& p : paths) {
    if (p.gbps[1].empty()) {
      std::printf("%-14s %10.2f %9.2fx\n", p.name, ps::Median(p.gbps[0]), ps::Median(p.ratio[0]));
      continue;
    }
    std::printf("%-14s %10.2f %9.2fx %16.2f %15.2fx\n", p.name, ps::Median(p.gbps[0]),
                ps::Median(p.ratio[0]), ps::Median(p.gbps[1]), ps::Median(p.ratio[1]));
  }
  return 0;
}
