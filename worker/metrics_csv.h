// The metrics CSV of a run (train.metrics_csv): one row per worker and
// interval, appended by every worker's process to one file, and set aside
// by ps_launch before the next run (MetricsCsv::SetAside). The file's
// format and its checks live here on their own (library ps_metrics_csv,
// over common only), so that the launcher uses them without the worker's
// backends and models. The rows come from TrainingProgress
// (worker/progress.h).
#ifndef PS_WORKER_METRICS_CSV_H_
#define PS_WORKER_METRICS_CSV_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace ps {

// Where the time of a training step went, in milliseconds per step (a mean
// over some steps; evaluations left out):
//   - step: wall time;
//   - pull and push: time the training thread waited in the ParamStore's
//     pulls and pushes (ParamStore::Times);
//   - h2d, compute, d2h: the compute backend's busy time (DeviceTimes):
//     copies to the device, compute, copies back. A GPU runs copies and
//     compute at once, so these may add up to more than the step. On the
//     cpu backend the MLP copies nothing (Mlp::TrainStep computes where
//     the parameters were pulled and writes the gradient where it is
//     pushed from); the sparse models still copy their pulled rows in and
//     their gradients out (memcpy), and those copies count here.
struct StepBreakdown {
  double step_ms = 0, pull_ms = 0, h2d_ms = 0, compute_ms = 0, d2h_ms = 0, push_ms = 0;
  // "step 12.30 ms: pull 3.10, h2d 0.40, compute 5.20, d2h 0.40, push 2.00"
  std::string ToString() const;
};

// Rows of a metrics CSV shared by every worker of a run. The file is
// created with its header line when missing (atomically: a half-written
// header is never seen) and each row is one append, so the workers'
// processes may write to the same file at once.
//
// Thread-compatible: one thread at a time per MetricsCsv.
class MetricsCsv {
 public:
  static constexpr const char* kHeader =
      "time_s,clock,worker,epoch,loss,metric_name,metric,samples_per_s,staleness_wait_s,"
      "step_ms,pull_ms,h2d_ms,compute_ms,d2h_ms,push_ms";
  // The header before the step breakdown's columns: SetAside moves such a
  // file aside too (Open refuses to append to it).
  static constexpr const char* kHeaderWithoutBreakdown =
      "time_s,clock,worker,epoch,loss,metric_name,metric,samples_per_s,staleness_wait_s";
  // Opens (creating when missing) `path`. InvalidArgument naming the path
  // when it cannot be created or is not a metrics CSV (another header).
  static StatusOr<std::unique_ptr<MetricsCsv>> Open(const std::string& path);
  // Before a new run: renames an existing metrics CSV at `path` to
  // `path`.prev (replacing an older one) and returns true; false when there
  // is none. InvalidArgument when `path` exists but is not a metrics CSV
  // (it is left alone).
  static StatusOr<bool> SetAside(const std::string& path);
  ~MetricsCsv();
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;

  struct Row {
    double time_s = 0;
    int64_t clock = 0;
    uint32_t worker = 0;  // kEvaluatorWorker: written "evaluator", with no loss
    double epoch = 0;
    double loss = 0;
    std::string metric_name;        // empty when no evaluation
    std::optional<double> metric;
    double samples_per_s = 0;
    double staleness_wait_s = 0;
    StepBreakdown breakdown;  // of the interval the row ends
  };
  // One line; Internal naming the path when the write fails (disk full).
  Status Append(const Row& row);
  const std::string& path() const { return path_; }

 private:
  MetricsCsv(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace ps

#endif  // PS_WORKER_METRICS_CSV_H_
