#include "worker/metrics_csv.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "common/logging.h"
#include "common/options.h"

namespace ps {

namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// Writes all of `text` to `fd`; false on an error (errno set).
bool WriteAll(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

// Creates `path` holding exactly `header` + "\n" unless it exists: the
// header is written to a temporary file that link() then puts in place,
// which fails instead of replacing an existing file.
Status CreateWithHeader(const std::string& path, const std::string& header) {
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return InvalidArgumentError("train.metrics_csv: cannot create a file beside " + path + ": " +
                                ErrnoText(errno) + "; check that the folder exists and is writable");
  }
  const bool written = WriteAll(fd, header + "\n") && ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  Status result;
  if (!written) {
    result = InternalError("train.metrics_csv: cannot write " + tmp + ": " + ErrnoText(write_errno));
  } else if (::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
    result = InvalidArgumentError("train.metrics_csv: cannot create " + path + ": " +
                                  ErrnoText(errno));
  }
  ::unlink(tmp.c_str());
  return result;
}

std::string Number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  return fmt::format("{:.6g}", v);
}

}  // namespace

namespace {

// Whether the file open at `fd` starts with the line `header`.
bool StartsWithLine(int fd, const std::string& header) {
  const std::string expected = header + "\n";
  std::string head(expected.size(), '\0');
  const ssize_t n = ::pread(fd, head.data(), head.size(), 0);
  return n == static_cast<ssize_t>(head.size()) && head == expected;
}

// InvalidArgument unless the file open at `fd` starts with the header line
// (or, with `earlier`, the header of the version before the breakdown).
Status CheckHeader(int fd, const std::string& path, bool earlier = false) {
  if (!StartsWithLine(fd, MetricsCsv::kHeader) &&
      !(earlier && StartsWithLine(fd, MetricsCsv::kHeaderWithoutBreakdown))) {
    return InvalidArgumentError("train.metrics_csv: " + path +
                                " exists and is not a metrics CSV (its first line is not \"" +
                                MetricsCsv::kHeader + "\"); remove it or choose another path");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<MetricsCsv>> MetricsCsv::Open(const std::string& path) {
  if (path.empty()) return InvalidArgumentError("train.metrics_csv: empty path");
  PS_RETURN_IF_ERROR(CreateWithHeader(path, kHeader));
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    return InvalidArgumentError("train.metrics_csv: cannot open " + path + ": " +
                                ErrnoText(errno));
  }
  // An existing file must be a metrics CSV: appending rows to anything else
  // would damage it.
  if (Status header = CheckHeader(fd, path); !header.ok()) {
    ::close(fd);
    return header;
  }
  return std::unique_ptr<MetricsCsv>(new MetricsCsv(path, fd));
}

StatusOr<bool> MetricsCsv::SetAside(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    return InvalidArgumentError("train.metrics_csv: cannot read " + path + ": " +
                                ErrnoText(errno));
  }
  Status header = CheckHeader(fd, path, /*earlier=*/true);
  ::close(fd);
  PS_RETURN_IF_ERROR(header);
  const std::string prev = path + ".prev";
  if (::rename(path.c_str(), prev.c_str()) != 0) {
    return InvalidArgumentError("train.metrics_csv: cannot move " + path + " to " + prev + ": " +
                                ErrnoText(errno));
  }
  return true;
}

MetricsCsv::~MetricsCsv() {
  if (fd_ >= 0) ::close(fd_);
}

Status MetricsCsv::Append(const Row& row) {
  const bool evaluator = row.worker == kEvaluatorWorker;
  const StepBreakdown& b = row.breakdown;
  const std::string line = fmt::format(
      "{:.3f},{},{},{:.4f},{},{},{},{:.1f},{:.3f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f}\n",
      row.time_s, row.clock, evaluator ? std::string("evaluator") : std::to_string(row.worker),
      row.epoch, evaluator ? std::string() : Number(row.loss),
      row.metric ? row.metric_name : std::string(),
      row.metric ? Number(*row.metric) : std::string(), row.samples_per_s, row.staleness_wait_s,
      b.step_ms, b.pull_ms, b.h2d_ms, b.compute_ms, b.d2h_ms, b.push_ms);
  // One write() per row: with O_APPEND, rows of several processes never interleave.
  if (!WriteAll(fd_, line)) {
    return InternalError("train.metrics_csv: cannot append to " + path_ + ": " + ErrnoText(errno));
  }
  return Status::Ok();
}

std::string StepBreakdown::ToString() const {
  return fmt::format("step {:.2f} ms: pull {:.2f}, h2d {:.2f}, compute {:.2f}, d2h {:.2f}, "
                     "push {:.2f}",
                     step_ms, pull_ms, h2d_ms, compute_ms, d2h_ms, push_ms);
}

}  // namespace ps
