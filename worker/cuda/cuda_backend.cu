// The CUDA backend. Row-major matrices are passed to column-major cuBLAS by
// computing the transpose: a row-major X is the column-major X^T with the
// same leading dimension, so row-major C = op(A) op(B) is column-major
// C^T = op(B)^T op(A)^T, i.e. cuBLAS with the operands swapped.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "worker/cuda/cuda_backend.h"

namespace ps::cuda {
namespace {

// The one place that turns CUDA and cuBLAS errors into a ps::Status; `what`
// names the call that failed.
Status ToStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  // Clear a non-sticky error so it does not resurface from the next call.
  (void)cudaGetLastError();
  std::string msg = std::string("CUDA ") + what + " failed: " + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + ")";
  if (err == cudaErrorMemoryAllocation) {
    return ResourceExhaustedError(msg + "; use a smaller batch or model");
  }
  return InternalError(msg);
}

Status ToStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  std::string msg = std::string("cuBLAS ") + what + " failed: " + cublasGetStatusName(st) + " (" +
                    cublasGetStatusString(st) + ")";
  if (st == CUBLAS_STATUS_ALLOC_FAILED) return ResourceExhaustedError(msg);
  return InternalError(msg);
}

struct CudaFree {
  void operator()(void* p) const {
    // A destructor cannot report; a failing cudaFree means the context is
    // already broken, which the next op reports.
    (void)cudaFree(p);
  }
};
using DeviceMemory = std::unique_ptr<void, CudaFree>;

Status AllocateDevice(size_t bytes, DeviceMemory* out) {
  void* p = nullptr;
  PS_RETURN_IF_ERROR(ToStatus(cudaMalloc(&p, bytes), "cudaMalloc"));
  out->reset(p);
  return Status::Ok();
}

class CudaBuffer : public DeviceBuffer {
 public:
  CudaBuffer(const Backend* owner, DeviceMemory memory, size_t size)
      : DeviceBuffer(owner, static_cast<float*>(memory.get()), size), memory_(std::move(memory)) {}

 private:
  DeviceMemory memory_;
};

constexpr int kThreads = 256;

int Blocks(size_t n) {
  // Grid-stride loops cover the rest, so the grid can be capped.
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? (blocks == 0 ? 1 : blocks) : 65535);
}

__global__ void AddBiasKernel(size_t rows, size_t cols, const float* bias, float* x) {
  const size_t n = rows * cols;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    x[i] += bias[i % cols];
  }
}

__global__ void ReluKernel(size_t n, float* x) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    x[i] = fmaxf(x[i], 0.0f);
  }
}

__global__ void ReluBackwardKernel(size_t n, const float* act, float* grad) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    if (act[i] <= 0.0f) grad[i] = 0.0f;
  }
}

// One thread per column, walking down the rows: neighbouring threads read
// neighbouring addresses, so every row is one coalesced read.
__global__ void SumRowsKernel(size_t rows, size_t cols, const float* x, float* out) {
  for (size_t c = blockIdx.x * size_t{blockDim.x} + threadIdx.x; c < cols;
       c += size_t{gridDim.x} * blockDim.x) {
    float sum = 0.0f;
    for (size_t r = 0; r < rows; ++r) sum += x[r * cols + c];
    out[c] = sum;
  }
}

__device__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One warp per row: max, sum of exponentials, then probabilities, gradient
// and the row's loss. The row test is uniform across a warp, so every lane
// takes part in the shuffles. Each element is read before it is written in
// the last pass, so probs or grad may alias logits.
__global__ void SoftmaxCrossEntropyKernel(size_t rows, size_t classes, const float* logits,
                                          const int32_t* labels, float* probs, float* grad,
                                          float* row_loss) {
  const size_t row = (blockIdx.x * size_t{blockDim.x} + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* in = logits + row * classes;
  float max = -INFINITY;
  for (size_t c = lane; c < classes; c += 32) max = fmaxf(max, in[c]);
  max = WarpMax(max);
  float sum = 0.0f;
  for (size_t c = lane; c < classes; c += 32) sum += expf(in[c] - max);
  sum = WarpSum(sum);
  const auto label = static_cast<size_t>(labels[row]);
  if (lane == 0) row_loss[row] = logf(sum) - (in[label] - max);
  __syncwarp();
  const float inv_rows = 1.0f / static_cast<float>(rows);
  for (size_t c = lane; c < classes; c += 32) {
    const float p = expf(in[c] - max) / sum;
    if (grad != nullptr) grad[row * classes + c] = (p - (c == label ? 1.0f : 0.0f)) * inv_rows;
    probs[row * classes + c] = p;
  }
}

// Warp-per-row kernels: the warp's index and the number of warps in the
// grid. Every lane of a warp gets the same row, so the loops over rows are
// uniform across the warp and every lane takes part in the shuffles.
__device__ size_t WarpIndex() { return (blockIdx.x * size_t{blockDim.x} + threadIdx.x) / 32; }
__device__ size_t WarpCount() { return size_t{gridDim.x} * blockDim.x / 32; }

__global__ void GatherRowsKernel(size_t m, size_t cols, const float* table, const uint32_t* index,
                                 float* out) {
  const size_t n = m * cols;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = table[size_t{index[i / cols]} * cols + i % cols];
  }
}

// Repeated indices meet in atomicAdd, which makes the order of the sum
// (and so its last bits) depend on scheduling.
__global__ void ScatterAddRowsKernel(size_t m, size_t cols, const float* src, const uint32_t* index,
                                     float* table) {
  const size_t n = m * cols;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    atomicAdd(&table[size_t{index[i / cols]} * cols + i % cols], src[i]);
  }
}

// One warp per row: lanes take strided elements, then a shuffle sum.
__global__ void RowDotsKernel(size_t m, size_t cols, const float* a, const float* b, float* out) {
  const unsigned lane = threadIdx.x % 32;
  for (size_t row = WarpIndex(); row < m; row += WarpCount()) {
    float sum = 0.0f;
    for (size_t c = lane; c < cols; c += 32) sum += a[row * cols + c] * b[row * cols + c];
    sum = WarpSum(sum);
    if (lane == 0) out[row] = sum;
  }
}

__global__ void ScaleRowsKernel(size_t m, size_t cols, const float* scale, float* x) {
  const size_t n = m * cols;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    x[i] *= scale[i / cols];
  }
}

__global__ void FillKernel(size_t n, float value, float* x) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    x[i] = value;
  }
}

// y[r] = sum of x over row r's columns: one warp per row, in a fixed order.
__global__ void CsrRowSumsKernel(size_t rows, const uint64_t* offsets, const uint32_t* cols,
                                 const float* x, float* y) {
  const unsigned lane = threadIdx.x % 32;
  for (size_t row = WarpIndex(); row < rows; row += WarpCount()) {
    float sum = 0.0f;
    for (uint64_t j = offsets[row] + lane; j < offsets[row + 1]; j += 32) sum += x[cols[j]];
    sum = WarpSum(sum);
    if (lane == 0) y[row] = sum;
  }
}

// y[c] += x[r] for every stored (r, c), y cleared beforehand: one warp per
// row; columns shared by rows meet in atomicAdd.
__global__ void CsrColumnSumsKernel(size_t rows, const uint64_t* offsets, const uint32_t* cols,
                                    const float* x, float* y) {
  const unsigned lane = threadIdx.x % 32;
  for (size_t row = WarpIndex(); row < rows; row += WarpCount()) {
    const float v = x[row];
    for (uint64_t j = offsets[row] + lane; j < offsets[row + 1]; j += 32) atomicAdd(&y[cols[j]], v);
  }
}

// Per element: the loss log(1 + exp(-m)) of the margin m = z (label 1) or
// -z (label 0) in a form that cannot overflow, and (sigmoid(z) - y) / n.
// z is read before grad[i] is written, so grad may alias logits.
__global__ void LogisticLossKernel(size_t n, const float* logits, const int32_t* labels,
                                   float* grad, float* loss) {
  const float inv_n = 1.0f / static_cast<float>(n);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float z = logits[i];
    const bool positive = labels[i] == 1;
    const float m = positive ? z : -z;
    loss[i] = log1pf(expf(-fabsf(m))) + fmaxf(-m, 0.0f);
    if (grad != nullptr) {
      const float e = expf(-fabsf(z));
      const float sigmoid = z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
      grad[i] = (sigmoid - (positive ? 1.0f : 0.0f)) * inv_n;
    }
  }
}

// Device memory for what an op brings from the host (indices, labels) or
// keeps per element (losses): it grows to the largest request and is reused.
// Reuse is safe because every op runs on the default stream: a copy into it
// waits for the kernels launched before, which may still read it.
class Scratch {
 public:
  // At least `bytes` of device memory; the contents are not kept when it grows.
  StatusOr<void*> Get(size_t bytes) {
    if (bytes > bytes_) {
      memory_.reset();  // cudaFree waits for the device, so no kernel still reads it
      bytes_ = 0;
      PS_RETURN_IF_ERROR(AllocateDevice(bytes, &memory_));
      bytes_ = bytes;
    }
    return memory_.get();
  }

  // Copies `count` elements from host memory into the scratch and returns
  // their device address; `what` names them in an error.
  template <typename T>
  StatusOr<const T*> Put(const T* host, size_t count, const char* what) {
    PS_ASSIGN_OR_RETURN(void* device, Get(count * sizeof(T)));
    if (count > 0) {
      PS_RETURN_IF_ERROR(
          ToStatus(cudaMemcpy(device, host, count * sizeof(T), cudaMemcpyHostToDevice), what));
    }
    return static_cast<const T*>(device);
  }

 private:
  DeviceMemory memory_;
  size_t bytes_ = 0;
};

constexpr size_t kMaxCublasDim = static_cast<size_t>(INT_MAX);

class CudaBackend : public Backend {
 public:
  CudaBackend(int device, std::string device_name, cublasHandle_t handle)
      : device_(device), device_name_(std::move(device_name)), handle_(handle) {}
  ~CudaBackend() override { (void)cublasDestroy(handle_); }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override {
    return "cuda (" + device_name_ + ", device " + std::to_string(device_) + ")";
  }

  StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t floats) override {
    if (floats == 0) return InvalidArgumentError("cuda Allocate: 0 floats requested");
    DeviceMemory memory;
    PS_RETURN_IF_ERROR(AllocateDevice(floats * sizeof(float), &memory));
    return std::unique_ptr<DeviceBuffer>(
        std::make_unique<CudaBuffer>(this, std::move(memory), floats));
  }

  Status Upload(const float* host, size_t n, DeviceBuffer* buffer) override {
    PS_RETURN_IF_ERROR(CheckBuffer(buffer, n, "Upload", "buffer"));
    if (n == 0) return Status::Ok();
    return ToStatus(cudaMemcpy(buffer->data(), host, n * sizeof(float), cudaMemcpyHostToDevice),
                    "cudaMemcpy (upload)");
  }

  Status Download(const DeviceBuffer& buffer, float* host, size_t n) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&buffer, n, "Download", "buffer"));
    if (n == 0) return ToStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    // A blocking copy on the default stream waits for every earlier op.
    return ToStatus(cudaMemcpy(host, buffer.data(), n * sizeof(float), cudaMemcpyDeviceToHost),
                    "cudaMemcpy (download)");
  }

  Status Gemm(Transpose trans_a, Transpose trans_b, size_t m, size_t n, size_t k, float alpha,
              const DeviceBuffer& a, const DeviceBuffer& b, float beta, DeviceBuffer* c) override {
    PS_RETURN_IF_ERROR(CheckGemmArgs(m, n, k, a, b, c, kMaxCublasDim));
    const bool ta = trans_a == Transpose::kYes;
    const bool tb = trans_b == Transpose::kYes;
    // Column-major C^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m).
    return ToStatus(
        cublasSgemm(handle_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                    static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b.data(),
                    static_cast<int>(tb ? k : n), a.data(), static_cast<int>(ta ? m : k), &beta,
                    c->data(), static_cast<int>(n)),
        "cublasSgemm");
  }

  Status Gemv(Transpose trans, size_t rows, size_t cols, float alpha, const DeviceBuffer& a,
              const DeviceBuffer& x, float beta, DeviceBuffer* y) override {
    PS_RETURN_IF_ERROR(CheckGemvArgs(trans, rows, cols, a, x, y, kMaxCublasDim));
    const bool t = trans == Transpose::kYes;
    // Row-major A (rows x cols) is column-major A^T (cols x rows), so A x is
    // a transposed product in cuBLAS's terms and A^T x a plain one.
    return ToStatus(cublasSgemv(handle_, t ? CUBLAS_OP_N : CUBLAS_OP_T, static_cast<int>(cols),
                                static_cast<int>(rows), &alpha, a.data(), static_cast<int>(cols),
                                x.data(), 1, &beta, y->data(), 1),
                    "cublasSgemv");
  }

  Status Axpy(size_t n, float alpha, const DeviceBuffer& x, DeviceBuffer* y) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&x, n, "Axpy", "x"));
    PS_RETURN_IF_ERROR(CheckBuffer(y, n, "Axpy", "y"));
    if (n > kMaxCublasDim) return InvalidArgumentError("cuda Axpy: n exceeds cuBLAS's int range");
    if (n == 0) return Status::Ok();
    return ToStatus(cublasSaxpy(handle_, static_cast<int>(n), &alpha, x.data(), 1, y->data(), 1),
                    "cublasSaxpy");
  }

  Status Scale(size_t n, float alpha, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(x, n, "Scale", "x"));
    if (n > kMaxCublasDim) return InvalidArgumentError("cuda Scale: n exceeds cuBLAS's int range");
    if (n == 0) return Status::Ok();
    return ToStatus(cublasSscal(handle_, static_cast<int>(n), &alpha, x->data(), 1), "cublasSscal");
  }

  Status AddBias(size_t rows, size_t cols, const DeviceBuffer& bias, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&bias, cols, "AddBias", "bias"));
    PS_RETURN_IF_ERROR(CheckBuffer(x, rows * cols, "AddBias", "X"));
    if (rows == 0 || cols == 0) return Status::Ok();
    AddBiasKernel<<<Blocks(rows * cols), kThreads>>>(rows, cols, bias.data(), x->data());
    return ToStatus(cudaGetLastError(), "AddBias kernel launch");
  }

  Status Relu(size_t n, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(x, n, "Relu", "x"));
    if (n == 0) return Status::Ok();
    ReluKernel<<<Blocks(n), kThreads>>>(n, x->data());
    return ToStatus(cudaGetLastError(), "Relu kernel launch");
  }

  Status ReluBackward(size_t n, const DeviceBuffer& activations, DeviceBuffer* grad) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&activations, n, "ReluBackward", "activations"));
    PS_RETURN_IF_ERROR(CheckBuffer(grad, n, "ReluBackward", "grad"));
    if (n == 0) return Status::Ok();
    ReluBackwardKernel<<<Blocks(n), kThreads>>>(n, activations.data(), grad->data());
    return ToStatus(cudaGetLastError(), "ReluBackward kernel launch");
  }

  Status SumRows(size_t rows, size_t cols, const DeviceBuffer& x, DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&x, rows * cols, "SumRows", "X"));
    PS_RETURN_IF_ERROR(CheckBuffer(out, cols, "SumRows", "out"));
    if (cols == 0) return Status::Ok();
    SumRowsKernel<<<Blocks(cols), kThreads>>>(rows, cols, x.data(), out->data());
    return ToStatus(cudaGetLastError(), "SumRows kernel launch");
  }

  Status SoftmaxCrossEntropy(size_t rows, size_t classes, const DeviceBuffer& logits,
                             const int32_t* labels, DeviceBuffer* probs, DeviceBuffer* grad,
                             float* loss) override {
    PS_RETURN_IF_ERROR(CheckSoftmaxArgs(rows, classes, logits, labels, probs, grad, loss));
    PS_ASSIGN_OR_RETURN(const int32_t* device_labels,
                        labels_.Put(labels, rows, "cudaMemcpy (labels)"));
    PS_ASSIGN_OR_RETURN(void* row_loss, losses_.Get(rows * sizeof(float)));
    const size_t threads = rows * 32;
    const size_t blocks = (threads + kThreads - 1) / kThreads;
    if (blocks > static_cast<size_t>(INT_MAX)) {
      return InvalidArgumentError("cuda SoftmaxCrossEntropy: too many rows");
    }
    SoftmaxCrossEntropyKernel<<<static_cast<unsigned>(blocks), kThreads>>>(
        rows, classes, logits.data(), device_labels, probs->data(),
        grad == nullptr ? nullptr : grad->data(), static_cast<float*>(row_loss));
    PS_RETURN_IF_ERROR(ToStatus(cudaGetLastError(), "SoftmaxCrossEntropy kernel launch"));
    return MeanOnHost(row_loss, rows, loss);
  }

  Status GatherRows(size_t rows, size_t cols, const DeviceBuffer& table, const uint32_t* index,
                    size_t m, DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(
        CheckIndexedRowsArgs("GatherRows", rows, cols, &table, index, m, out, "out"));
    if (m == 0 || cols == 0) return Status::Ok();
    PS_ASSIGN_OR_RETURN(const uint32_t* device_index,
                        index_.Put(index, m, "cudaMemcpy (GatherRows index)"));
    GatherRowsKernel<<<Blocks(m * cols), kThreads>>>(m, cols, table.data(), device_index,
                                                     out->data());
    return ToStatus(cudaGetLastError(), "GatherRows kernel launch");
  }

  Status ScatterAddRows(size_t m, size_t cols, const DeviceBuffer& src, const uint32_t* index,
                        size_t rows, DeviceBuffer* table) override {
    PS_RETURN_IF_ERROR(
        CheckIndexedRowsArgs("ScatterAddRows", rows, cols, table, index, m, &src, "src"));
    if (m == 0 || cols == 0) return Status::Ok();
    PS_ASSIGN_OR_RETURN(const uint32_t* device_index,
                        index_.Put(index, m, "cudaMemcpy (ScatterAddRows index)"));
    ScatterAddRowsKernel<<<Blocks(m * cols), kThreads>>>(m, cols, src.data(), device_index,
                                                         table->data());
    return ToStatus(cudaGetLastError(), "ScatterAddRows kernel launch");
  }

  Status RowDots(size_t m, size_t cols, const DeviceBuffer& a, const DeviceBuffer& b,
                 DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&a, m * cols, "RowDots", "A"));
    PS_RETURN_IF_ERROR(CheckBuffer(&b, m * cols, "RowDots", "B"));
    PS_RETURN_IF_ERROR(CheckBuffer(out, m, "RowDots", "out"));
    if (m == 0) return Status::Ok();
    RowDotsKernel<<<Blocks(m * 32), kThreads>>>(m, cols, a.data(), b.data(), out->data());
    return ToStatus(cudaGetLastError(), "RowDots kernel launch");
  }

  Status ScaleRows(size_t m, size_t cols, const DeviceBuffer& scale, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&scale, m, "ScaleRows", "scale"));
    PS_RETURN_IF_ERROR(CheckBuffer(x, m * cols, "ScaleRows", "X"));
    if (m == 0 || cols == 0) return Status::Ok();
    ScaleRowsKernel<<<Blocks(m * cols), kThreads>>>(m, cols, scale.data(), x->data());
    return ToStatus(cudaGetLastError(), "ScaleRows kernel launch");
  }

  Status Fill(size_t n, float value, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(x, n, "Fill", "x"));
    if (n == 0) return Status::Ok();
    FillKernel<<<Blocks(n), kThreads>>>(n, value, x->data());
    return ToStatus(cudaGetLastError(), "Fill kernel launch");
  }

  Status CsrMatVec(Transpose trans, size_t rows, size_t cols, const uint64_t* row_offsets,
                   const uint32_t* col_index, const DeviceBuffer& x, DeviceBuffer* y) override {
    PS_RETURN_IF_ERROR(CheckCsrArgs(trans, rows, cols, row_offsets, col_index, x, y));
    const bool t = trans == Transpose::kYes;
    if (t && cols > 0) {
      // The column sums accumulate into y, so it starts at zero (all-zero
      // bytes are 0.0f).
      PS_RETURN_IF_ERROR(ToStatus(cudaMemsetAsync(y->data(), 0, cols * sizeof(float), 0),
                                  "cudaMemsetAsync (CsrMatVec y)"));
    }
    if (rows == 0) return Status::Ok();
    const uint64_t nnz = row_offsets[rows];
    PS_ASSIGN_OR_RETURN(const uint64_t* device_offsets,
                        offsets_.Put(row_offsets, rows + 1, "cudaMemcpy (CsrMatVec row_offsets)"));
    PS_ASSIGN_OR_RETURN(
        const uint32_t* device_cols,
        index_.Put(col_index, static_cast<size_t>(nnz), "cudaMemcpy (CsrMatVec col_index)"));
    if (t) {
      if (nnz == 0) return Status::Ok();
      CsrColumnSumsKernel<<<Blocks(rows * 32), kThreads>>>(rows, device_offsets, device_cols,
                                                           x.data(), y->data());
      return ToStatus(cudaGetLastError(), "CsrMatVec (transposed) kernel launch");
    }
    CsrRowSumsKernel<<<Blocks(rows * 32), kThreads>>>(rows, device_offsets, device_cols, x.data(),
                                                      y->data());
    return ToStatus(cudaGetLastError(), "CsrMatVec kernel launch");
  }

  Status LogisticLoss(size_t n, const DeviceBuffer& logits, const int32_t* labels,
                      DeviceBuffer* grad, float* loss) override {
    PS_RETURN_IF_ERROR(CheckLogisticArgs(n, logits, labels, grad, loss));
    PS_ASSIGN_OR_RETURN(const int32_t* device_labels,
                        labels_.Put(labels, n, "cudaMemcpy (labels)"));
    PS_ASSIGN_OR_RETURN(void* element_loss, losses_.Get(n * sizeof(float)));
    LogisticLossKernel<<<Blocks(n), kThreads>>>(n, logits.data(), device_labels,
                                                grad == nullptr ? nullptr : grad->data(),
                                                static_cast<float*>(element_loss));
    PS_RETURN_IF_ERROR(ToStatus(cudaGetLastError(), "LogisticLoss kernel launch"));
    return MeanOnHost(element_loss, n, loss);
  }

 private:
  // *mean = the mean of `n` floats at `device`, taken on the host in double:
  // n is a batch, so the copy is small. The blocking copy waits for the
  // kernel that wrote them.
  Status MeanOnHost(const void* device, size_t n, float* mean) {
    host_loss_.resize(n);
    PS_RETURN_IF_ERROR(
        ToStatus(cudaMemcpy(host_loss_.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost),
                 "cudaMemcpy (losses)"));
    double total = 0;
    for (float l : host_loss_) total += l;
    *mean = static_cast<float>(total / static_cast<double>(n));
    return Status::Ok();
  }

  const int device_;
  const std::string device_name_;
  const cublasHandle_t handle_;
  Scratch labels_;   // int32 labels of SoftmaxCrossEntropy and LogisticLoss
  Scratch losses_;   // per-row (per-element) losses before their mean
  Scratch index_;    // uint32 row indices, CSR column indices
  Scratch offsets_;  // uint64 CSR row offsets
  std::vector<float> host_loss_;
};

}  // namespace

int DeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    // The usual answers on a host without a GPU read like a broken driver;
    // say what they mean there.
    if (err == cudaErrorInsufficientDriver) {
      *why = "no NVIDIA driver is loaded on this host (cudaErrorInsufficientDriver: a host "
             "without a GPU, or a driver older than this build's CUDA runtime)";
    } else if (err == cudaErrorNoDevice) {
      *why = "the NVIDIA driver reports no GPU (cudaErrorNoDevice)";
    } else {
      *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(err) + " (" +
             cudaGetErrorString(err) + ")";
    }
    return 0;
  }
  if (count == 0) *why = "the CUDA driver reports no device";
  return count;
}

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  PS_RETURN_IF_ERROR(ToStatus(cudaSetDevice(device), "cudaSetDevice"));
  cudaDeviceProp prop{};
  PS_RETURN_IF_ERROR(ToStatus(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"));
  cublasHandle_t handle = nullptr;
  PS_RETURN_IF_ERROR(ToStatus(cublasCreate(&handle), "cublasCreate"));
  // Full FP32 products: TF32 would break the parity the tests hold to.
  Status st = ToStatus(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  if (!st.ok()) {
    (void)cublasDestroy(handle);
    return st;
  }
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(device, prop.name, handle));
}

}  // namespace ps::cuda
