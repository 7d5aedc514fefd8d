// Backend: the compute interface the workers' models run on. Matrices are
// float32, row-major, and live in backend memory (host memory for the CPU
// backend, device memory for the CUDA backend) inside DeviceBuffers that the
// backend allocates. Models are written once against this interface; the
// worker picks the implementation with CreateBackend (worker.device,
// worker/backend_factory.h).
//
// Every op checks that each buffer was allocated by this backend and is large
// enough for the shape it is given (buffers may be larger than needed, so one
// allocation can serve batches of different sizes); a violation is
// InvalidArgument and nothing is computed. Ops may run asynchronously on the
// device: an error from one op can surface from a later call, at the latest
// from the next Synchronize or Download, which wait for all earlier work.
//
// A Backend and its buffers are thread-compatible: one thread at a time per
// backend. Buffers must not outlive the backend that allocated them.
#ifndef PS_WORKER_BACKEND_H_
#define PS_WORKER_BACKEND_H_

#include <algorithm>
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

// A part of another buffer, or host memory viewed as a buffer of a backend
// whose memory is host memory (Backend::host_memory): no allocation and no
// copy, so a model can compute on parameters where they were pulled and
// write gradients where they are pushed from. Built on the stack or kept
// as a member; must not outlive what it views. Ops accept it like any
// buffer of its backend.
class BufferView final : public DeviceBuffer {
 public:
  // [offset, offset + size) of `parent`.
  // REQUIRES: offset + size <= parent.size().
  BufferView(const DeviceBuffer& parent, size_t offset, size_t size)
      : DeviceBuffer(parent.owner(), const_cast<float*>(parent.data()) + offset, size) {}
  // `size` floats at `host` as a buffer of `backend`.
  // REQUIRES: backend.host_memory().
  BufferView(const Backend& backend, float* host, size_t size)
      : DeviceBuffer(&backend, host, size) {}
  BufferView(const Backend& backend, const float* host, size_t size)
      : DeviceBuffer(&backend, const_cast<float*>(host), size) {}
};

// Host memory made page-locked for a backend's asynchronous copies
// (Backend::Pin); unlocked when destroyed. Keep it no longer than the
// memory it pins, and destroy it before the backend.
class PinnedHost {
 public:
  virtual ~PinnedHost() = default;
  PinnedHost() = default;
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
};

// Time a backend spent on its work since it was created, in seconds:
// copies into its memory (uploads), compute, copies out of it (downloads).
// A device backend measures each on the device, where copies run beside
// compute, so the three may overlap and their sum exceed the wall time;
// the cpu backend times its ops and copies only when asked to.
struct DeviceTimes {
  double upload_s = 0;
  double compute_s = 0;
  double download_s = 0;
};

// Whether an operand of Gemm/Gemv (or the sparse matrix of CsrMatVec) is
// used as stored or transposed.
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

  // Copies buffer[0, n) to host memory after all earlier ops have finished
  // (and, like Synchronize, finishes every op queued so far).
  // REQUIRES: n <= buffer.size(), else InvalidArgument.
  virtual Status Download(const DeviceBuffer& buffer, float* host, size_t n) = 0;

  // Whether this backend's memory is host memory (the cpu backend): a
  // BufferView may then view host memory, and a model can skip its copies.
  virtual bool host_memory() const { return false; }

  // Upload and Download that may return before the copy is done: the copy
  // runs on the device's copy engine beside compute, and waits only for what
  // it must (an upload for earlier ops on the buffer, a download for the
  // ops queued before it; an op reading an uploaded buffer waits for that
  // upload alone). `host` must stay unchanged (upload) or unread (download)
  // until Synchronize returns; it should be pinned (Pin) for the copy to be
  // asynchronous. The checks and errors are Upload's and Download's.
  virtual Status UploadAsync(const float* host, size_t n, DeviceBuffer* buffer) {
    return Upload(host, n, buffer);
  }
  virtual Status DownloadAsync(const DeviceBuffer& buffer, float* host, size_t n) {
    return Download(buffer, host, n);
  }

  // Waits for every op and copy queued so far; the losses of
  // SoftmaxCrossEntropy and LogisticLoss are written when it returns. An
  // error of an earlier asynchronous op surfaces here.
  virtual Status Synchronize() { return Status::Ok(); }

  // Page-locks `floats` floats at `host` for UploadAsync and DownloadAsync
  // (a no-op for the cpu backend). Internal when the device refuses.
  virtual StatusOr<std::unique_ptr<PinnedHost>> Pin(const float* host, size_t floats) {
    (void)host;
    (void)floats;
    return std::make_unique<PinnedHost>();
  }

  // Busy time so far (DeviceTimes); up to date after Synchronize or Download.
  virtual DeviceTimes times() const = 0;

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
  // labels (rows, in host memory, which may be reused at once): probs =
  // softmax(logits) per row; *loss = mean over rows of
  // -log(probs[r][labels[r]]), written by the time the next Synchronize or
  // Download returns (at once by the cpu backend); if grad is not
  // null, grad = (probs - onehot(labels)) / rows, the gradient of *loss with
  // respect to the logits. probs (and grad) may be the logits buffer itself.
  // A label outside [0, classes) is InvalidArgument and nothing is written.
  // REQUIRES: rows, classes >= 1; loss != nullptr; probs and grad distinct.
  virtual Status SoftmaxCrossEntropy(size_t rows, size_t classes, const DeviceBuffer& logits,
                                     const int32_t* labels, DeviceBuffer* probs, DeviceBuffer* grad,
                                     float* loss) = 0;

  // The sparse ops below take index arrays in host memory (a device backend
  // copies them over); every index is checked on the host before anything
  // runs, so an index out of range is InvalidArgument and nothing is written.

  // out[i][:] = table[index[i]][:] for i in [0, m): gathers m rows of the
  // table (rows x cols) into out (m x cols); an index may repeat.
  // REQUIRES: index has m entries, each < rows; out does not overlap table.
  virtual Status GatherRows(size_t rows, size_t cols, const DeviceBuffer& table,
                            const uint32_t* index, size_t m, DeviceBuffer* out) = 0;

  // table[index[i]][:] += src[i][:] for i in [0, m), for src m x cols and
  // table rows x cols. A repeated index receives the sum of its source rows
  // (added in an unspecified order on a device, so the last bits may differ
  // between runs there).
  // REQUIRES: index has m entries, each < rows; src does not overlap table.
  virtual Status ScatterAddRows(size_t m, size_t cols, const DeviceBuffer& src,
                                const uint32_t* index, size_t rows, DeviceBuffer* table) = 0;

  // out[i] = dot(A[i][:], B[i][:]) for A and B m x cols (row-wise dot
  // products). Overwrites out[0, m).
  // REQUIRES: out does not overlap A or B.
  virtual Status RowDots(size_t m, size_t cols, const DeviceBuffer& a, const DeviceBuffer& b,
                         DeviceBuffer* out) = 0;

  // X[i][:] *= scale[i] for X m x cols.
  // REQUIRES: scale does not overlap X.
  virtual Status ScaleRows(size_t m, size_t cols, const DeviceBuffer& scale, DeviceBuffer* x) = 0;

  // x[0, n) = value.
  virtual Status Fill(size_t n, float value, DeviceBuffer* x) = 0;

  // y = op(S) x for a binary sparse matrix S (rows x cols, every stored
  // value 1) in CSR form: row r stores the columns
  // col_index[row_offsets[r] .. row_offsets[r + 1]), and a column stored
  // twice in a row counts twice. kNo: y[r] = sum of x[c] over the columns c
  // stored in row r (x has cols elements; overwrites y[0, rows)). kYes:
  // y[c] = sum of x[r] over the rows r that store column c (x has rows
  // elements; overwrites y[0, cols)).
  // REQUIRES: row_offsets has rows + 1 entries, starts at 0 and never
  // decreases; col_index has row_offsets[rows] entries, each < cols; y does
  // not overlap x. A violation is InvalidArgument and nothing is written.
  virtual Status CsrMatVec(Transpose trans, size_t rows, size_t cols, const uint64_t* row_offsets,
                           const uint32_t* col_index, const DeviceBuffer& x, DeviceBuffer* y) = 0;

  // Mean logistic loss of n logits z with labels y (host memory, each 0 or
  // 1): *loss = mean over i of log(1 + exp(-z_i)) for y_i = 1 and
  // log(1 + exp(z_i)) for y_i = 0, computed without overflow for any z,
  // written by the next Synchronize or Download like SoftmaxCrossEntropy's. If
  // grad is not null, grad[i] = (sigmoid(z_i) - y_i) / n, the gradient of
  // *loss with respect to the logits; grad may be the logits buffer itself.
  // A label other than 0 or 1 is InvalidArgument and nothing is written.
  // REQUIRES: n >= 1; loss != nullptr.
  virtual Status LogisticLoss(size_t n, const DeviceBuffer& logits, const int32_t* labels,
                              DeviceBuffer* grad, float* loss) = 0;

 protected:
  // The shared argument check of every op: InvalidArgument unless `buffer`
  // is not null, was allocated by this backend and holds at least `needed`
  // floats. `op` and `arg` name the call and argument in the message.
  Status CheckBuffer(const DeviceBuffer* buffer, size_t needed, std::string_view op,
                     std::string_view arg) const {
    // The message is built only on failure: these checks run on every op.
    const auto where = [&] {
      return std::string(name()) + " " + std::string(op) + ": " + std::string(arg);
    };
    if (buffer == nullptr) return InvalidArgumentError(where() + " is null");
    if (buffer->owner() != this) {
      return InvalidArgumentError(where() +
                                  " was allocated by another backend; allocate it with this one");
    }
    if (buffer->size() < needed) {
      return InvalidArgumentError(where() + " holds " + std::to_string(buffer->size()) +
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
    const auto where = [&] { return std::string(name()) + " SoftmaxCrossEntropy: "; };
    if (rows == 0 || classes == 0) {
      return InvalidArgumentError(where() + "rows and classes must be >= 1");
    }
    if (labels == nullptr || loss == nullptr) {
      return InvalidArgumentError(where() + "labels and loss must not be null");
    }
    PS_RETURN_IF_ERROR(CheckBuffer(&logits, rows * classes, "SoftmaxCrossEntropy", "logits"));
    PS_RETURN_IF_ERROR(CheckBuffer(probs, rows * classes, "SoftmaxCrossEntropy", "probs"));
    if (grad != nullptr) {
      PS_RETURN_IF_ERROR(CheckBuffer(grad, rows * classes, "SoftmaxCrossEntropy", "grad"));
    }
    for (size_t r = 0; r < rows; ++r) {
      if (labels[r] < 0 || static_cast<size_t>(labels[r]) >= classes) {
        return InvalidArgumentError(where() + "label " + std::to_string(labels[r]) + " of row " +
                                    std::to_string(r) + " is outside [0, " +
                                    std::to_string(classes) + ")");
      }
    }
    return Status::Ok();
  }

  // The argument check of GatherRows and ScatterAddRows, shared by every
  // backend: `table` holds rows x cols floats, `batch` (out or src, named
  // `batch_arg`) m x cols, and each of the m indices is below rows.
  Status CheckIndexedRowsArgs(std::string_view op, size_t rows, size_t cols,
                              const DeviceBuffer* table, const uint32_t* index, size_t m,
                              const DeviceBuffer* batch, std::string_view batch_arg) const {
    PS_RETURN_IF_ERROR(CheckBuffer(table, rows * cols, op, "table"));
    PS_RETURN_IF_ERROR(CheckBuffer(batch, m * cols, op, batch_arg));
    const auto where = [&] { return std::string(name()) + " " + std::string(op) + ": "; };
    if (m > 0 && index == nullptr) return InvalidArgumentError(where() + "index is null");
    for (size_t i = 0; i < m; ++i) {
      if (index[i] >= rows) {
        return InvalidArgumentError(
            where() + "index[" + std::to_string(i) + "] = " + std::to_string(index[i]) +
            " is outside the table's rows [0, " + std::to_string(rows) + ")");
      }
    }
    return Status::Ok();
  }

  // The argument check of CsrMatVec, shared by every backend: x and y large
  // enough, row_offsets starting at 0 and never decreasing, and every column
  // index below cols (all checked on the host).
  Status CheckCsrArgs(Transpose trans, size_t rows, size_t cols, const uint64_t* row_offsets,
                      const uint32_t* col_index, const DeviceBuffer& x,
                      const DeviceBuffer* y) const {
    const bool t = trans == Transpose::kYes;
    PS_RETURN_IF_ERROR(CheckBuffer(&x, t ? rows : cols, "CsrMatVec", "x"));
    PS_RETURN_IF_ERROR(CheckBuffer(y, t ? cols : rows, "CsrMatVec", "y"));
    const auto where = [&] { return std::string(name()) + " CsrMatVec: "; };
    if (row_offsets == nullptr) return InvalidArgumentError(where() + "row_offsets is null");
    if (row_offsets[0] != 0) {
      return InvalidArgumentError(where() + "row_offsets[0] is " + std::to_string(row_offsets[0]) +
                                  "; it must be 0");
    }
    for (size_t r = 0; r < rows; ++r) {
      if (row_offsets[r + 1] < row_offsets[r]) {
        return InvalidArgumentError(where() + "row_offsets decrease at row " + std::to_string(r) +
                                    " (" + std::to_string(row_offsets[r]) + " then " +
                                    std::to_string(row_offsets[r + 1]) + ")");
      }
    }
    if (row_offsets[rows] > 0 && col_index == nullptr) {
      return InvalidArgumentError(where() + "col_index is null");
    }
    for (size_t r = 0; r < rows; ++r) {
      for (uint64_t j = row_offsets[r]; j < row_offsets[r + 1]; ++j) {
        if (col_index[j] >= cols) {
          return InvalidArgumentError(
              where() + "col_index[" + std::to_string(j) + "] = " + std::to_string(col_index[j]) +
              " (row " + std::to_string(r) + ") is outside [0, " + std::to_string(cols) + ")");
        }
      }
    }
    return Status::Ok();
  }

  // The argument check of LogisticLoss, shared by every backend: shapes,
  // buffers, and every label 0 or 1 (checked on the host).
  Status CheckLogisticArgs(size_t n, const DeviceBuffer& logits, const int32_t* labels,
                           const DeviceBuffer* grad, const float* loss) const {
    const auto where = [&] { return std::string(name()) + " LogisticLoss: "; };
    if (n == 0) return InvalidArgumentError(where() + "n must be >= 1");
    if (labels == nullptr || loss == nullptr) {
      return InvalidArgumentError(where() + "labels and loss must not be null");
    }
    PS_RETURN_IF_ERROR(CheckBuffer(&logits, n, "LogisticLoss", "logits"));
    if (grad != nullptr) PS_RETURN_IF_ERROR(CheckBuffer(grad, n, "LogisticLoss", "grad"));
    for (size_t i = 0; i < n; ++i) {
      if (labels[i] != 0 && labels[i] != 1) {
        return InvalidArgumentError(where() + "label " + std::to_string(labels[i]) +
                                    " of element " + std::to_string(i) + " is neither 0 nor 1");
      }
    }
    return Status::Ok();
  }
};

// Makes *buffer hold at least `floats` floats (at least one), allocating a
// new one from `backend` when it is null or smaller; a new buffer's contents
// are unspecified (the old ones are not kept). Grows by at least half its
// size so that a sequence of slowly rising sizes allocates a few times only.
inline Status GrowBuffer(Backend* backend, size_t floats, std::unique_ptr<DeviceBuffer>* buffer) {
  const size_t old = *buffer == nullptr ? 0 : (*buffer)->size();
  if (old >= floats && old > 0) return Status::Ok();
  const size_t want = std::max({floats, old + old / 2, size_t{1}});
  buffer->reset();  // the old one is freed before the new one is allocated
  PS_ASSIGN_OR_RETURN(*buffer, backend->Allocate(want));
  return Status::Ok();
}

// worker.device (common/options.h): auto picks CUDA when the CUDA backend
// was built and a device is present, else the CPU.
using BackendKind = DeviceKind;

// "auto", "cpu", "cuda".
std::string BackendKindName(BackendKind kind);
// Parses "auto" | "cpu" | "cuda"; anything else is InvalidArgument.
StatusOr<BackendKind> ParseBackendKind(std::string_view name);

}  // namespace ps

#endif  // PS_WORKER_BACKEND_H_
