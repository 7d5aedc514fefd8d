#include "worker/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "common/metrics.h"

namespace ps {
namespace {

class HostBuffer : public DeviceBuffer {
 public:
  HostBuffer(const Backend* owner, std::unique_ptr<float[]> data, size_t size)
      : DeviceBuffer(owner, data.get(), size), storage_(std::move(data)) {}

 private:
  std::unique_ptr<float[]> storage_;
};

// cblas takes int dimensions (OpenBLAS built without 64-bit interface).
constexpr size_t kMaxBlasDim = static_cast<size_t>(std::numeric_limits<blasint>::max());

class CpuBackend : public Backend {
 public:
  bool host_memory() const override { return true; }
  DeviceTimes times() const override { return times_; }

  std::string name() const override {
    const int threads = openblas_get_num_threads();
    return "cpu (OpenBLAS, " + std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
  }

  StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t floats) override {
    if (floats == 0) return InvalidArgumentError("cpu Allocate: 0 floats requested");
    std::unique_ptr<float[]> data(new (std::nothrow) float[floats]);
    if (data == nullptr) {
      return ResourceExhaustedError("cpu Allocate: out of host memory for " +
                                    std::to_string(floats) + " floats");
    }
    return std::unique_ptr<DeviceBuffer>(
        std::make_unique<HostBuffer>(this, std::move(data), floats));
  }

  Status Upload(const float* host, size_t n, DeviceBuffer* buffer) override {
    PS_RETURN_IF_ERROR(CheckBuffer(buffer, n, "Upload", "buffer"));
    const ScopedSeconds timer(&times_.upload_s);
    if (n > 0) std::memcpy(buffer->data(), host, n * sizeof(float));
    return Status::Ok();
  }

  Status Download(const DeviceBuffer& buffer, float* host, size_t n) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&buffer, n, "Download", "buffer"));
    const ScopedSeconds timer(&times_.download_s);
    if (n > 0) std::memcpy(host, buffer.data(), n * sizeof(float));
    return Status::Ok();
  }

  Status Gemm(Transpose trans_a, Transpose trans_b, size_t m, size_t n, size_t k, float alpha,
              const DeviceBuffer& a, const DeviceBuffer& b, float beta, DeviceBuffer* c) override {
    PS_RETURN_IF_ERROR(CheckGemmArgs(m, n, k, a, b, c, kMaxBlasDim));
    const ScopedSeconds timer(&times_.compute_s);
    const bool ta = trans_a == Transpose::kYes;
    const bool tb = trans_b == Transpose::kYes;
    // beta == 0 promises to ignore C, which may hold NaN garbage; BLAS
    // implementations differ on whether 0 * NaN is computed, so clear it.
    if (beta == 0.0f) std::fill_n(c->data(), m * n, 0.0f);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
                a.data(), static_cast<blasint>(ta ? m : k), b.data(),
                static_cast<blasint>(tb ? k : n), beta, c->data(), static_cast<blasint>(n));
    return Status::Ok();
  }

  Status Gemv(Transpose trans, size_t rows, size_t cols, float alpha, const DeviceBuffer& a,
              const DeviceBuffer& x, float beta, DeviceBuffer* y) override {
    PS_RETURN_IF_ERROR(CheckGemvArgs(trans, rows, cols, a, x, y, kMaxBlasDim));
    const ScopedSeconds timer(&times_.compute_s);
    const bool t = trans == Transpose::kYes;
    if (beta == 0.0f) std::fill_n(y->data(), t ? cols : rows, 0.0f);
    cblas_sgemv(CblasRowMajor, t ? CblasTrans : CblasNoTrans, static_cast<blasint>(rows),
                static_cast<blasint>(cols), alpha, a.data(), static_cast<blasint>(cols), x.data(),
                1, beta, y->data(), 1);
    return Status::Ok();
  }

  Status Axpy(size_t n, float alpha, const DeviceBuffer& x, DeviceBuffer* y) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&x, n, "Axpy", "x"));
    PS_RETURN_IF_ERROR(CheckBuffer(y, n, "Axpy", "y"));
    const ScopedSeconds timer(&times_.compute_s);
    const float* xs = x.data();
    float* ys = y->data();
    for (size_t i = 0; i < n; ++i) ys[i] += alpha * xs[i];
    return Status::Ok();
  }

  Status Scale(size_t n, float alpha, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(x, n, "Scale", "x"));
    const ScopedSeconds timer(&times_.compute_s);
    float* xs = x->data();
    for (size_t i = 0; i < n; ++i) xs[i] *= alpha;
    return Status::Ok();
  }

  Status AddBias(size_t rows, size_t cols, const DeviceBuffer& bias, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&bias, cols, "AddBias", "bias"));
    PS_RETURN_IF_ERROR(CheckBuffer(x, rows * cols, "AddBias", "X"));
    const ScopedSeconds timer(&times_.compute_s);
    const float* b = bias.data();
    float* xs = x->data();
    for (size_t r = 0; r < rows; ++r) {
      float* row = xs + r * cols;
      for (size_t c = 0; c < cols; ++c) row[c] += b[c];
    }
    return Status::Ok();
  }

  Status Relu(size_t n, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(x, n, "Relu", "x"));
    const ScopedSeconds timer(&times_.compute_s);
    float* xs = x->data();
    for (size_t i = 0; i < n; ++i) xs[i] = xs[i] > 0.0f ? xs[i] : 0.0f;
    return Status::Ok();
  }

  Status ReluBackward(size_t n, const DeviceBuffer& activations, DeviceBuffer* grad) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&activations, n, "ReluBackward", "activations"));
    PS_RETURN_IF_ERROR(CheckBuffer(grad, n, "ReluBackward", "grad"));
    const ScopedSeconds timer(&times_.compute_s);
    const float* act = activations.data();
    float* g = grad->data();
    for (size_t i = 0; i < n; ++i) {
      if (act[i] <= 0.0f) g[i] = 0.0f;
    }
    return Status::Ok();
  }

  Status SumRows(size_t rows, size_t cols, const DeviceBuffer& x, DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&x, rows * cols, "SumRows", "X"));
    PS_RETURN_IF_ERROR(CheckBuffer(out, cols, "SumRows", "out"));
    const ScopedSeconds timer(&times_.compute_s);
    const float* xs = x.data();
    float* o = out->data();
    std::fill_n(o, cols, 0.0f);
    // Row by row so the inner loop is contiguous.
    for (size_t r = 0; r < rows; ++r) {
      const float* row = xs + r * cols;
      for (size_t c = 0; c < cols; ++c) o[c] += row[c];
    }
    return Status::Ok();
  }

  Status SoftmaxCrossEntropy(size_t rows, size_t classes, const DeviceBuffer& logits,
                             const int32_t* labels, DeviceBuffer* probs, DeviceBuffer* grad,
                             float* loss) override {
    PS_RETURN_IF_ERROR(CheckSoftmaxArgs(rows, classes, logits, labels, probs, grad, loss));
    const ScopedSeconds timer(&times_.compute_s);
    const float inv_rows = 1.0f / static_cast<float>(rows);
    double total = 0;
    for (size_t r = 0; r < rows; ++r) {
      const float* in = logits.data() + r * classes;
      float* p = probs->data() + r * classes;
      // Subtracting the row maximum keeps exp() finite; the loss uses the
      // log-sum-exp form so a tiny probability does not become log(0).
      float max = in[0];
      for (size_t c = 1; c < classes; ++c) max = std::max(max, in[c]);
      double sum = 0;
      for (size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(in[c] - max));
      const auto label = static_cast<size_t>(labels[r]);
      total += std::log(sum) - static_cast<double>(in[label] - max);
      const double inv_sum = 1.0 / sum;
      // `in` may alias p or the grad row: each element is read before it is written.
      for (size_t c = 0; c < classes; ++c) {
        const auto pc = static_cast<float>(std::exp(static_cast<double>(in[c] - max)) * inv_sum);
        if (grad != nullptr) {
          grad->data()[r * classes + c] = (pc - (c == label ? 1.0f : 0.0f)) * inv_rows;
        }
        p[c] = pc;
      }
    }
    *loss = static_cast<float>(total / static_cast<double>(rows));
    return Status::Ok();
  }

  Status GatherRows(size_t rows, size_t cols, const DeviceBuffer& table, const uint32_t* index,
                    size_t m, DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(
        CheckIndexedRowsArgs("GatherRows", rows, cols, &table, index, m, out, "out"));
    const ScopedSeconds timer(&times_.compute_s);
    // A plain loop rather than a memcpy per row: rows are often a few floats.
    for (size_t i = 0; i < m; ++i) {
      const float* from = table.data() + size_t{index[i]} * cols;
      float* to = out->data() + i * cols;
      for (size_t c = 0; c < cols; ++c) to[c] = from[c];
    }
    return Status::Ok();
  }

  Status ScatterAddRows(size_t m, size_t cols, const DeviceBuffer& src, const uint32_t* index,
                        size_t rows, DeviceBuffer* table) override {
    PS_RETURN_IF_ERROR(
        CheckIndexedRowsArgs("ScatterAddRows", rows, cols, table, index, m, &src, "src"));
    const ScopedSeconds timer(&times_.compute_s);
    for (size_t i = 0; i < m; ++i) {
      const float* from = src.data() + i * cols;
      float* to = table->data() + size_t{index[i]} * cols;
      for (size_t c = 0; c < cols; ++c) to[c] += from[c];
    }
    return Status::Ok();
  }

  Status RowDots(size_t m, size_t cols, const DeviceBuffer& a, const DeviceBuffer& b,
                 DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&a, m * cols, "RowDots", "A"));
    PS_RETURN_IF_ERROR(CheckBuffer(&b, m * cols, "RowDots", "B"));
    PS_RETURN_IF_ERROR(CheckBuffer(out, m, "RowDots", "out"));
    const ScopedSeconds timer(&times_.compute_s);
    for (size_t i = 0; i < m; ++i) {
      const float* x = a.data() + i * cols;
      const float* y = b.data() + i * cols;
      // Rows are short (factor rows): a double sum costs nothing here.
      double dot = 0;
      for (size_t c = 0; c < cols; ++c) dot += double{x[c]} * y[c];
      out->data()[i] = static_cast<float>(dot);
    }
    return Status::Ok();
  }

  Status ScaleRows(size_t m, size_t cols, const DeviceBuffer& scale, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&scale, m, "ScaleRows", "scale"));
    PS_RETURN_IF_ERROR(CheckBuffer(x, m * cols, "ScaleRows", "X"));
    const ScopedSeconds timer(&times_.compute_s);
    for (size_t i = 0; i < m; ++i) {
      const float s = scale.data()[i];
      float* row = x->data() + i * cols;
      for (size_t c = 0; c < cols; ++c) row[c] *= s;
    }
    return Status::Ok();
  }

  Status Fill(size_t n, float value, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(x, n, "Fill", "x"));
    const ScopedSeconds timer(&times_.compute_s);
    std::fill_n(x->data(), n, value);
    return Status::Ok();
  }

  Status CsrMatVec(Transpose trans, size_t rows, size_t cols, const uint64_t* row_offsets,
                   const uint32_t* col_index, const DeviceBuffer& x, DeviceBuffer* y) override {
    PS_RETURN_IF_ERROR(CheckCsrArgs(trans, rows, cols, row_offsets, col_index, x, y));
    const ScopedSeconds timer(&times_.compute_s);
    const float* xs = x.data();
    float* ys = y->data();
    if (trans == Transpose::kNo) {
      for (size_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (uint64_t j = row_offsets[r]; j < row_offsets[r + 1]; ++j) sum += xs[col_index[j]];
        ys[r] = static_cast<float>(sum);
      }
    } else {
      std::fill_n(ys, cols, 0.0f);
      for (size_t r = 0; r < rows; ++r) {
        const float v = xs[r];
        for (uint64_t j = row_offsets[r]; j < row_offsets[r + 1]; ++j) ys[col_index[j]] += v;
      }
    }
    return Status::Ok();
  }

  Status LogisticLoss(size_t n, const DeviceBuffer& logits, const int32_t* labels,
                      DeviceBuffer* grad, float* loss) override {
    PS_RETURN_IF_ERROR(CheckLogisticArgs(n, logits, labels, grad, loss));
    const ScopedSeconds timer(&times_.compute_s);
    const double inv_n = 1.0 / static_cast<double>(n);
    double total = 0;
    for (size_t i = 0; i < n; ++i) {
      // `logits` may be the grad buffer: z is read before grad[i] is written.
      const double z = logits.data()[i];
      const bool positive = labels[i] == 1;
      // log(1 + exp(-m)) for the margin m, without overflow for any m.
      const double m = positive ? z : -z;
      total += std::log1p(std::exp(-std::abs(m))) + std::max(-m, 0.0);
      if (grad != nullptr) {
        const double e = std::exp(-std::abs(z));
        const double sigmoid = z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
        grad->data()[i] = static_cast<float>((sigmoid - (positive ? 1.0 : 0.0)) * inv_n);
      }
    }
    *loss = static_cast<float>(total * inv_n);
    return Status::Ok();
  }

 private:
  DeviceTimes times_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(uint32_t threads) {
  if (threads > 0) openblas_set_num_threads(static_cast<int>(threads));
  return std::make_unique<CpuBackend>();
}

}  // namespace ps
