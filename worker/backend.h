// Backend: the compute interface the workers' models run on. Matrices are
// float32, row-major, and live in backend memory (host memory for the CPU
// backend, device memory for the CUDA backend) inside DeviceBuffers that the
// backend allocates. Models are written once against this interface; the
// worker picks the implementation with CreateBackend (worker.device).
//
// Every op checks that each buffer was allocated by this backend and is large
// enough for the shape it is given (buffers may be larger than needed, so one
// allocation can serve batches of different sizes); a violation is
// InvalidArgument and nothing is computed. Ops may run asynchronously on the
// device: an error from one op can surface from a later call, at the latest
// from the next Download, which waits for all earlier work.
//
// A Backend and its buffers are thread-compatible: one thread at a time per
// backend. Buffers must not outlive the backend that allocated them.
#ifndef PS_WORKER_BACKEND_H_
#define PS_WORKER_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/options.h"
#include "common/status.h"

namespace ps {

class Backend;

// A block of floats in a backend's memory, freed when destroyed. Only the
// backend that allocated it may read or write its contents.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Capacity in floats.
  size_t size() const { return size_; }
  // The backend that allocated this buffer.
  const Backend* owner() const { return owner_; }
  // Address in the owner's memory space (a device pointer for CUDA); not
  // dereferenceable by host code in general.
  float* data() { return data_; }
  const float* data() const { return data_; }

 protected:
  // `owner` must outlive the buffer; `data` points at `size` floats that the
  // subclass frees in its destructor.
  DeviceBuffer(const Backend* owner, float* data, size_t size)
      : owner_(owner), data_(data), size_(size) {}

 private:
  const Backend* const owner_;
  float* const data_;
  const size_t size_;
};

// Whether an operand of Gemm/Gemv is used as stored or transposed.
enum class Transpose { kNo, kYes };

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu (OpenBLAS)", "cuda (NVIDIA H200, device 0)", ...: for logs.
  virtual std::string name() const = 0;

  // Allocates `floats` floats (contents unspecified). `floats` == 0 is
  // InvalidArgument; out of memory is ResourceExhausted.
  virtual StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t floats) = 0;

  // Copies n floats from host memory into buffer[0, n).
  // REQUIRES: n <= buffer->size(), else InvalidArgument.
  virtual Status Upload(const float* host, size_t n, DeviceBuffer* buffer) = 0;

  // Copies buffer[0, n) to host memory after all earlier ops have finished.
  // REQUIRES: n <= buffer.size(), else InvalidArgument.
  virtual Status Download(const DeviceBuffer& buffer, float* host, size_t n) = 0;

  // C = alpha * op(A) * op(B) + beta * C, with C m x n, op(A) m x k and
  // op(B) k x n. A is stored m x k (kNo) or k x m (kYes); B is stored k x n
  // (kNo) or n x k (kYes). With beta == 0, C's old contents are ignored
  // (they may be uninitialized).
  // REQUIRES: m, n, k >= 1; C does not overlap A or B.
  virtual Status Gemm(Transpose trans_a, Transpose trans_b, size_t m, size_t n, size_t k,
                      float alpha, const DeviceBuffer& a, const DeviceBuffer& b, float beta,
                      DeviceBuffer* c) = 0;

  // y = alpha * op(A) * x + beta * y for A stored rows x cols; x has cols
  // (kNo) or rows (kYes) elements, y the other count. With beta == 0, y's old
  // contents are ignored.
  // REQUIRES: rows, cols >= 1; y does not overlap A or x.
  virtual Status Gemv(Transpose trans, size_t rows, size_t cols, float alpha, const DeviceBuffer& a,
                      const DeviceBuffer& x, float beta, DeviceBuffer* y) = 0;

  // y[0, n) += alpha * x[0, n).
  virtual Status Axpy(size_t n, float alpha, const DeviceBuffer& x, DeviceBuffer* y) = 0;

  // x[0, n) *= alpha.
  virtual Status Scale(size_t n, float alpha, DeviceBuffer* x) = 0;

  // Adds the row vector bias[0, cols) to every row of X (rows x cols).
  virtual Status AddBias(size_t rows, size_t cols, const DeviceBuffer& bias, DeviceBuffer* x) = 0;

  // x[i] = max(x[i], 0) for i in [0, n).
  virtual Status Relu(size_t n, DeviceBuffer* x) = 0;

  // grad[i] = 0 where activations[i] <= 0, for i in [0, n): the backward of
  // Relu given its output.
  virtual Status ReluBackward(size_t n, const DeviceBuffer& activations, DeviceBuffer* grad) = 0;

  // out[j] = sum over i of X[i][j] for X rows x cols (column sums; the bias
  // gradient of AddBias). Overwrites out[0, cols).
  // REQUIRES: out does not overlap X.
  virtual Status SumRows(size_t rows, size_t cols, const DeviceBuffer& x, DeviceBuffer* out) = 0;

  // Softmax and mean cross-entropy for logits (rows x classes) and integer
  // labels (rows, in host memory): probs = softmax(logits) per row;
  // *loss = mean over rows of -log(probs[r][labels[r]]); if grad is not
  // null, grad = (probs - onehot(labels)) / rows, the gradient of *loss with
  // respect to the logits. probs (and grad) may be the logits buffer itself.
  // A label outside [0, classes) is InvalidArgument and nothing is written.
  // REQUIRES: rows, classes >= 1; loss != nullptr; probs and grad distinct.
  virtual Status SoftmaxCrossEntropy(size_t rows, size_t classes, const DeviceBuffer& logits,
                                     const int32_t* labels, DeviceBuffer* probs, DeviceBuffer* grad,
                                     float* loss) = 0;

 protected:
  // The shared argument check of every op: InvalidArgument unless `buffer`
  // is not null, was allocated by this backend and holds at least `needed`
  // floats. `op` and `arg` name the call and argument in the message.
  Status CheckBuffer(const DeviceBuffer* buffer, size_t needed, std::string_view op,
                     std::string_view arg) const {
    std::string where = std::string(name()) + " " + std::string(op) + ": " + std::string(arg);
    if (buffer == nullptr) return InvalidArgumentError(where + " is null");
    if (buffer->owner() != this) {
      return InvalidArgumentError(where +
                                  " was allocated by another backend; allocate it with this one");
    }
    if (buffer->size() < needed) {
      return InvalidArgumentError(where + " holds " + std::to_string(buffer->size()) +
                                  " floats but the shape needs " + std::to_string(needed));
    }
    return Status::Ok();
  }

  // The argument checks of Gemm and Gemv, shared by every backend: sizes
  // >= 1 and <= `max_dim` (the library's integer range), buffers large
  // enough for the shapes.
  Status CheckGemmArgs(size_t m, size_t n, size_t k, const DeviceBuffer& a, const DeviceBuffer& b,
                       const DeviceBuffer* c, size_t max_dim) const {
    if (m == 0 || n == 0 || k == 0) {
      return InvalidArgumentError(std::string(name()) + " Gemm: m, n and k must be >= 1");
    }
    if (m > max_dim || n > max_dim || k > max_dim) {
      return InvalidArgumentError(std::string(name()) + " Gemm: dimensions exceed " +
                                  std::to_string(max_dim) + ", the library's int range");
    }
    PS_RETURN_IF_ERROR(CheckBuffer(&a, m * k, "Gemm", "A"));
    PS_RETURN_IF_ERROR(CheckBuffer(&b, k * n, "Gemm", "B"));
    return CheckBuffer(c, m * n, "Gemm", "C");
  }
  Status CheckGemvArgs(Transpose trans, size_t rows, size_t cols, const DeviceBuffer& a,
                       const DeviceBuffer& x, const DeviceBuffer* y, size_t max_dim) const {
    if (rows == 0 || cols == 0) {
      return InvalidArgumentError(std::string(name()) + " Gemv: rows and cols must be >= 1");
    }
    if (rows > max_dim || cols > max_dim) {
      return InvalidArgumentError(std::string(name()) + " Gemv: dimensions exceed " +
                                  std::to_string(max_dim) + ", the library's int range");
    }
    const bool t = trans == Transpose::kYes;
    PS_RETURN_IF_ERROR(CheckBuffer(&a, rows * cols, "Gemv", "A"));
    PS_RETURN_IF_ERROR(CheckBuffer(&x, t ? rows : cols, "Gemv", "x"));
    return CheckBuffer(y, t ? cols : rows, "Gemv", "y");
  }

  // The argument check of SoftmaxCrossEntropy, shared by every backend:
  // shapes, buffers, and every label inside [0, classes) (checked on the
  // host, where an error can still be returned).
  Status CheckSoftmaxArgs(size_t rows, size_t classes, const DeviceBuffer& logits,
                          const int32_t* labels, const DeviceBuffer* probs,
                          const DeviceBuffer* grad, const float* loss) const {
    const std::string where = std::string(name()) + " SoftmaxCrossEntropy: ";
    if (rows == 0 || classes == 0) {
      return InvalidArgumentError(where + "rows and classes must be >= 1");
    }
    if (labels == nullptr || loss == nullptr) {
      return InvalidArgumentError(where + "labels and loss must not be null");
    }
    PS_RETURN_IF_ERROR(CheckBuffer(&logits, rows * classes, "SoftmaxCrossEntropy", "logits"));
    PS_RETURN_IF_ERROR(CheckBuffer(probs, rows * classes, "SoftmaxCrossEntropy", "probs"));
    if (grad != nullptr) {
      PS_RETURN_IF_ERROR(CheckBuffer(grad, rows * classes, "SoftmaxCrossEntropy", "grad"));
    }
    for (size_t r = 0; r < rows; ++r) {
      if (labels[r] < 0 || static_cast<size_t>(labels[r]) >= classes) {
        return InvalidArgumentError(where + "label " + std::to_string(labels[r]) + " of row " +
                                    std::to_string(r) + " is outside [0, " +
                                    std::to_string(classes) + ")");
      }
    }
    return Status::Ok();
  }
};

// worker.device (common/options.h): auto picks CUDA when the CUDA backend
// was built and a device is present, else the CPU.
using BackendKind = DeviceKind;

// "auto", "cpu", "cuda".
std::string BackendKindName(BackendKind kind);
// Parses "auto" | "cpu" | "cuda"; anything else is InvalidArgument.
StatusOr<BackendKind> ParseBackendKind(std::string_view name);

// Number of CUDA devices this process can use: 0 when the CUDA backend was
// not built, there is no driver or no device. Never fails or aborts.
int CudaDeviceCount();

// Creates a backend and logs which one and why. kCuda without a usable
// device (or in a build without the CUDA backend) is FailedPrecondition
// naming the reason; a CUDA initialisation failure is Internal.
StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind);

}  // namespace ps

#endif  // PS_WORKER_BACKEND_H_
