// transport_bench's report: the rows it measures, the options that shape a
// run (Config), and how the tables and the targets are printed.
#ifndef PS_BENCHMARKS_TRANSPORT_REPORT_H_
#define PS_BENCHMARKS_TRANSPORT_REPORT_H_

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/machine.h"
#include "benchmarks/transport_common.h"
#include "common/transport.h"

namespace ps::transport_bench {

inline std::string SizeLabel(uint64_t bytes) {
  if (bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

struct Row {
  uint64_t bytes;
  OpKind op;
  int depth;
  double ours_mbps, raw_mbps, ours_p50, raw_p50, ours_p99, raw_p99;
  uint64_t ours_ops, raw_ops;
};

inline std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

struct Config {
  std::vector<uint64_t> sizes;
  std::vector<int> depths = {1, 8};
  std::vector<OpKind> ops = {OpKind::kPush, OpKind::kPull, OpKind::kPushPull};
  int reps = 5;
  Limits limits;
  Limits warmup{0.05, 4};
  uint64_t oneway_messages = 50000;
  uint64_t oneway_bytes = 4096;
  bool oneway = true;
  bool run_ours = true;  // --only: measure one side (for profiling)
  bool run_raw = true;
  bool pull_into_buffer = false;  // --pull-into buffer
  bool curve = false;             // --curve
  uint32_t replication = 1;       // --replication K: factor K against factor 1
  bool metrics = false;           // --metrics: metrics served against none
  uint32_t busy_cores = 0;        // --busy-cores: spinning processes while measuring
};

// The first words of the line that says where a run measured.
inline std::string HostLine(const Config& cfg) {
  std::string line = "libzmq " + ZmqVersion() + ", " +
                     std::to_string(std::thread::hardware_concurrency()) +
                     " hardware threads, CPU " + CpuModel();
  if (cfg.busy_cores > 0) {
    line += ", " + std::to_string(cfg.busy_cores) +
            " of them kept busy by spinning processes (--busy-cores)";
  }
  return line;
}

// The table of `rows`, side a against side b (ratio a/b).
inline void PrintRows(const std::vector<Row>& rows, const std::string& a, const std::string& b) {
  std::printf("| size | op | in flight | %s MB/s | %s MB/s | ratio | %s p50 us | %s p50 us "
              "| ratio (lower better) | %s p99 us | %s p99 us | ratio (lower better) | ops "
              "%s/%s |\n",
              a.c_str(), b.c_str(), a.c_str(), b.c_str(), a.c_str(), b.c_str(), a.c_str(),
              b.c_str());
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& w : rows) {
    std::printf("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %" PRIu64 "/%" PRIu64
                " |\n",
                SizeLabel(w.bytes).c_str(), OpLabel(w.op), w.depth,
                Fmt("%.0f", w.ours_mbps).c_str(), Fmt("%.0f", w.raw_mbps).c_str(),
                Fmt("%.2f", w.ours_mbps / w.raw_mbps).c_str(), Fmt("%.1f", w.ours_p50).c_str(),
                Fmt("%.1f", w.raw_p50).c_str(), Fmt("%.2f", w.ours_p50 / w.raw_p50).c_str(),
                Fmt("%.1f", w.ours_p99).c_str(), Fmt("%.1f", w.raw_p99).c_str(),
                Fmt("%.2f", w.ours_p99 / w.raw_p99).c_str(), w.ours_ops, w.raw_ops);
  }
  std::printf("\n");
}

// The targets this benchmark exists for, side by side with what the run
// measured; `oneway_ratio`: ours 4 KiB pushes against the raw one-way rate,
// negative when not measured.
inline void PrintTargets(const Config& cfg, const std::vector<Row>& rows, double oneway_ratio) {
  std::printf("Targets:\n\n| target | measured | met |\n|---|---|---|\n");
  for (const Row& w : rows) {
    const bool curve_size = cfg.curve && w.bytes == (64u << 10);
    // With busy cores only pulls have a target: a push is applied by the
    // shard, one more pass over its values than raw makes, and that pass
    // competes for the free cores (benchmarks/docs/transport_bench.md, "A busy host").
    const bool busy_push = cfg.busy_cores > 0 && w.op == OpKind::kPush;
    if ((w.bytes == (1u << 20) || w.bytes == (16u << 20) || curve_size) &&
        w.op != OpKind::kPushPull && !busy_push) {
      const double ratio = w.ours_mbps / w.raw_mbps;
      // Under CURVE both sides spend most of their time encrypting.
      const double target = cfg.busy_cores > 0 ? 0.8 : cfg.curve ? 0.9 : 0.95;
      const std::string busy =
          cfg.busy_cores == 0 ? ""
          : ", " + std::to_string(cfg.busy_cores) + (cfg.busy_cores == 1 ? " core" : " cores") +
              " busy";
      std::printf("| %s %s, %d in flight%s: >= %.2fx raw%s MB/s | %.2fx | %s |\n",
                  SizeLabel(w.bytes).c_str(), OpLabel(w.op), w.depth, busy.c_str(), target,
                  cfg.curve ? " CURVE" : "", ratio, ratio >= target ? "yes" : "NO");
    }
    if (w.bytes == 4096 && w.depth == 1 && w.op != OpKind::kPushPull) {
      const double ratio = w.ours_p50 / w.raw_p50;
      std::printf("| 4 KiB %s round trip, 1 in flight: p50 <= 1.2x raw | %.2fx | %s |\n",
                  OpLabel(w.op), ratio, ratio <= 1.2 ? "yes" : "NO");
    }
  }
  if (oneway_ratio >= 0) {
    const double ratio = oneway_ratio;
    std::printf("| 4 KiB push, 8 in flight: >= 0.5x raw one-way msgs/s | %.2fx | %s |\n", ratio,
                ratio >= 0.5 ? "yes" : "NO");
  }
  std::printf("\n");
}

}  // namespace ps::transport_bench

#endif  // PS_BENCHMARKS_TRANSPORT_REPORT_H_
