// The CUDA backend. Row-major matrices are passed to column-major cuBLAS by
// computing the transpose: a row-major X is the column-major X^T with the
// same leading dimension, so row-major C = op(A) op(B) is column-major
// C^T = op(B)^T op(A)^T, i.e. cuBLAS with the operands swapped.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <type_traits>
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

// Owns a CUDA event; events are reused from the backend's pool, so one is
// created only while the pool grows (the first steps).
struct EventDestroy {
  void operator()(cudaEvent_t e) const { (void)cudaEventDestroy(e); }
};
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDestroy>;

Status CreateEvent(Event* out) {
  cudaEvent_t e = nullptr;
  PS_RETURN_IF_ERROR(ToStatus(cudaEventCreate(&e), "cudaEventCreate"));
  out->reset(e);
  return Status::Ok();
}

struct StreamDestroy {
  void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
};
using Stream = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDestroy>;

Status CreateStream(Stream* out) {
  cudaStream_t s = nullptr;
  // Non-blocking: no implicit ordering with the legacy default stream.
  PS_RETURN_IF_ERROR(
      ToStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
  out->reset(s);
  return Status::Ok();
}

struct HostFree {
  void operator()(void* p) const { (void)cudaFreeHost(p); }
};
using PinnedMemory = std::unique_ptr<void, HostFree>;

// Device memory for what an op brings from the host (indices, labels) or
// keeps per element (losses): it grows to the largest request and is reused.
// What comes from the host goes through page-locked staging and is copied
// asynchronously on the backend's compute stream; the staging is written
// again only once that copy is done (an event), and the device memory is
// reused by later ops on the same stream, which run in order.
class Scratch {
 public:
  // At least `bytes` of device memory; the contents are not kept when it grows.
  StatusOr<void*> Get(size_t bytes, cudaStream_t stream) {
    if (bytes > bytes_) {
      // Earlier ops on the stream may still read it.
      PS_RETURN_IF_ERROR(ToStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
      memory_.reset();
      bytes_ = 0;
      PS_RETURN_IF_ERROR(AllocateDevice(bytes, &memory_));
      bytes_ = bytes;
    }
    return memory_.get();
  }

  // Copies `count` elements from host memory into the scratch and returns
  // their device address; `what` names them in an error. The host memory
  // may be reused at once.
  template <typename T>
  StatusOr<const T*> Put(const T* host, size_t count, cudaStream_t stream, const char* what) {
    const size_t bytes = count * sizeof(T);
    PS_ASSIGN_OR_RETURN(void* device, Get(bytes, stream));
    if (count == 0) return static_cast<const T*>(device);
    if (staged_ == nullptr) PS_RETURN_IF_ERROR(CreateEvent(&staged_));
    // The previous copy out of the staging must be done before it is rewritten.
    PS_RETURN_IF_ERROR(ToStatus(cudaEventSynchronize(staged_.get()), "cudaEventSynchronize"));
    if (bytes > staging_bytes_) {
      void* p = nullptr;
      staging_.reset();
      staging_bytes_ = 0;
      PS_RETURN_IF_ERROR(ToStatus(cudaMallocHost(&p, bytes), "cudaMallocHost (staging)"));
      staging_.reset(p);
      staging_bytes_ = bytes;
    }
    std::memcpy(staging_.get(), host, bytes);
    PS_RETURN_IF_ERROR(ToStatus(
        cudaMemcpyAsync(device, staging_.get(), bytes, cudaMemcpyHostToDevice, stream), what));
    PS_RETURN_IF_ERROR(ToStatus(cudaEventRecord(staged_.get(), stream), "cudaEventRecord"));
    return static_cast<const T*>(device);
  }

 private:
  DeviceMemory memory_;
  size_t bytes_ = 0;
  PinnedMemory staging_;
  size_t staging_bytes_ = 0;
  Event staged_;  // recorded after the last copy out of staging_
};

// Host memory registered with cudaHostRegister until destroyed.
class RegisteredHost : public PinnedHost {
 public:
  explicit RegisteredHost(void* host) : host_(host) {}
  ~RegisteredHost() override {
    if (host_ != nullptr) (void)cudaHostUnregister(host_);
  }

 private:
  void* const host_;  // null: already page-locked by someone else
};

constexpr size_t kMaxCublasDim = static_cast<size_t>(INT_MAX);

// Work runs on three streams: compute (cuBLAS and every kernel), upload
// and download (the asynchronous copies, on the copy engines, beside
// compute). What orders them:
//   - an upload waits for the compute queued before it (that may still
//     read the buffer) only when there is any since the last Synchronize;
//     it is recorded as pending on its address range, and the first
//     compute op that touches the range makes the compute stream wait for
//     it: compute on other buffers (an earlier layer) runs meanwhile;
//   - a download waits for all compute queued before it, and is pending
//     on its range until a compute op writes there (which waits for it);
//   - Synchronize waits for all three and clears what is pending.
// Busy times come from events: around each copy, and around each run of
// compute ops between two waits (DeviceTimes).
class CudaBackend : public Backend {
 public:
  CudaBackend(int device, std::string device_name, cublasHandle_t handle, Stream compute,
              Stream upload, Stream download)
      : device_(device),
        device_name_(std::move(device_name)),
        handle_(handle),
        compute_(std::move(compute)),
        upload_(std::move(upload)),
        download_(std::move(download)) {}
  ~CudaBackend() override {
    // Buffers and staging are freed after this; nothing may still use them.
    (void)cudaStreamSynchronize(compute_.get());
    (void)cudaStreamSynchronize(upload_.get());
    (void)cudaStreamSynchronize(download_.get());
    (void)cublasDestroy(handle_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override {
    return "cuda (" + device_name_ + ", device " + std::to_string(device_) + ")";
  }

  DeviceTimes times() const override { return times_; }

  StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t floats) override {
    if (floats == 0) return InvalidArgumentError("cuda Allocate: 0 floats requested");
    DeviceMemory memory;
    PS_RETURN_IF_ERROR(AllocateDevice(floats * sizeof(float), &memory));
    return std::unique_ptr<DeviceBuffer>(
        std::make_unique<CudaBuffer>(this, std::move(memory), floats));
  }

  StatusOr<std::unique_ptr<PinnedHost>> Pin(const float* host, size_t floats) override {
    if (host == nullptr || floats == 0) return std::make_unique<PinnedHost>();
    void* p = const_cast<float*>(host);
    const cudaError_t err = cudaHostRegister(p, floats * sizeof(float), cudaHostRegisterDefault);
    if (err == cudaErrorHostMemoryAlreadyRegistered) {
      (void)cudaGetLastError();
      return std::unique_ptr<PinnedHost>(std::make_unique<RegisteredHost>(nullptr));
    }
    PS_RETURN_IF_ERROR(ToStatus(err, "cudaHostRegister"));
    return std::unique_ptr<PinnedHost>(std::make_unique<RegisteredHost>(p));
  }

  Status Upload(const float* host, size_t n, DeviceBuffer* buffer) override {
    PS_RETURN_IF_ERROR(CheckBuffer(buffer, n, "Upload", "buffer"));
    if (n == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Out(*buffer));
    PS_RETURN_IF_ERROR(EndCompute());
    PS_ASSIGN_OR_RETURN(size_t span, BeginSpan(compute_.get(), &times_.upload_s));
    PS_RETURN_IF_ERROR(ToStatus(cudaMemcpyAsync(buffer->data(), host, n * sizeof(float),
                                                cudaMemcpyHostToDevice, compute_.get()),
                                "cudaMemcpyAsync (upload)"));
    PS_RETURN_IF_ERROR(EndSpan(span, compute_.get()));
    compute_dirty_ = true;
    // `host` may be reused when this returns, also when it is page-locked.
    return ToStatus(cudaStreamSynchronize(compute_.get()), "cudaStreamSynchronize (upload)");
  }

  Status Download(const DeviceBuffer& buffer, float* host, size_t n) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&buffer, n, "Download", "buffer"));
    if (n > 0) {
      PS_RETURN_IF_ERROR(In(buffer));
      PS_RETURN_IF_ERROR(EndCompute());
      PS_ASSIGN_OR_RETURN(size_t span, BeginSpan(compute_.get(), &times_.download_s));
      PS_RETURN_IF_ERROR(ToStatus(cudaMemcpyAsync(host, buffer.data(), n * sizeof(float),
                                                  cudaMemcpyDeviceToHost, compute_.get()),
                                  "cudaMemcpyAsync (download)"));
      PS_RETURN_IF_ERROR(EndSpan(span, compute_.get()));
    }
    return Synchronize();
  }

  Status UploadAsync(const float* host, size_t n, DeviceBuffer* buffer) override {
    PS_RETURN_IF_ERROR(CheckBuffer(buffer, n, "UploadAsync", "buffer"));
    if (n == 0) return Status::Ok();
    const Range range = RangeOf(*buffer, n);
    cudaStream_t stream = upload_.get();
    if (compute_dirty_) PS_RETURN_IF_ERROR(StreamWaitsFor(stream, compute_.get()));
    // Not over a download still reading the range.
    PS_RETURN_IF_ERROR(WaitForOverlapping(&pending_downloads_, range, stream));
    PS_ASSIGN_OR_RETURN(size_t span, BeginSpan(stream, &times_.upload_s));
    PS_RETURN_IF_ERROR(ToStatus(
        cudaMemcpyAsync(buffer->data(), host, n * sizeof(float), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync (upload)"));
    PS_RETURN_IF_ERROR(EndSpan(span, stream));
    pending_uploads_.push_back({range, spans_[span].end});
    return Status::Ok();
  }

  Status DownloadAsync(const DeviceBuffer& buffer, float* host, size_t n) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&buffer, n, "DownloadAsync", "buffer"));
    if (n == 0) return Status::Ok();
    const Range range = RangeOf(buffer, n);
    cudaStream_t stream = download_.get();
    PS_RETURN_IF_ERROR(StreamWaitsFor(stream, compute_.get()));
    // An upload into the range that no compute op has waited for yet.
    PS_RETURN_IF_ERROR(WaitForOverlapping(&pending_uploads_, range, stream));
    PS_ASSIGN_OR_RETURN(size_t span, BeginSpan(stream, &times_.download_s));
    PS_RETURN_IF_ERROR(ToStatus(
        cudaMemcpyAsync(host, buffer.data(), n * sizeof(float), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync (download)"));
    PS_RETURN_IF_ERROR(EndSpan(span, stream));
    pending_downloads_.push_back({range, spans_[span].end});
    return Status::Ok();
  }

  Status Synchronize() override {
    const Status waited = WaitForStreams();
    pending_uploads_.clear();
    pending_downloads_.clear();
    compute_dirty_ = false;
    const Status timed = waited.ok() ? AddSpanTimes() : waited;
    spans_.clear();
    events_used_ = 0;
    if (timed.ok()) {
      for (const PendingLoss& p : pending_losses_) {
        double total = 0;
        for (size_t i = 0; i < p.count; ++i) total += loss_host_[p.first + i];
        *p.loss = static_cast<float>(total / static_cast<double>(p.count));
      }
    }
    pending_losses_.clear();
    return timed;
  }

  Status Gemm(Transpose trans_a, Transpose trans_b, size_t m, size_t n, size_t k, float alpha,
              const DeviceBuffer& a, const DeviceBuffer& b, float beta, DeviceBuffer* c) override {
    PS_RETURN_IF_ERROR(CheckGemmArgs(m, n, k, a, b, c, kMaxCublasDim));
    PS_RETURN_IF_ERROR(Compute({&a, &b}, {c}));
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
    PS_RETURN_IF_ERROR(Compute({&a, &x}, {y}));
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
    PS_RETURN_IF_ERROR(Compute({&x}, {y}));
    return ToStatus(cublasSaxpy(handle_, static_cast<int>(n), &alpha, x.data(), 1, y->data(), 1),
                    "cublasSaxpy");
  }

  Status Scale(size_t n, float alpha, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(x, n, "Scale", "x"));
    if (n > kMaxCublasDim) return InvalidArgumentError("cuda Scale: n exceeds cuBLAS's int range");
    if (n == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({}, {x}));
    return ToStatus(cublasSscal(handle_, static_cast<int>(n), &alpha, x->data(), 1), "cublasSscal");
  }

  Status AddBias(size_t rows, size_t cols, const DeviceBuffer& bias, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&bias, cols, "AddBias", "bias"));
    PS_RETURN_IF_ERROR(CheckBuffer(x, rows * cols, "AddBias", "X"));
    if (rows == 0 || cols == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({&bias}, {x}));
    AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, compute_.get()>>>(rows, cols, bias.data(),
                                                                         x->data());
    return ToStatus(cudaGetLastError(), "AddBias kernel launch");
  }

  Status Relu(size_t n, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(x, n, "Relu", "x"));
    if (n == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({}, {x}));
    ReluKernel<<<Blocks(n), kThreads, 0, compute_.get()>>>(n, x->data());
    return ToStatus(cudaGetLastError(), "Relu kernel launch");
  }

  Status ReluBackward(size_t n, const DeviceBuffer& activations, DeviceBuffer* grad) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&activations, n, "ReluBackward", "activations"));
    PS_RETURN_IF_ERROR(CheckBuffer(grad, n, "ReluBackward", "grad"));
    if (n == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({&activations}, {grad}));
    ReluBackwardKernel<<<Blocks(n), kThreads, 0, compute_.get()>>>(n, activations.data(),
                                                                   grad->data());
    return ToStatus(cudaGetLastError(), "ReluBackward kernel launch");
  }

  Status SumRows(size_t rows, size_t cols, const DeviceBuffer& x, DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&x, rows * cols, "SumRows", "X"));
    PS_RETURN_IF_ERROR(CheckBuffer(out, cols, "SumRows", "out"));
    if (cols == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({&x}, {out}));
    SumRowsKernel<<<Blocks(cols), kThreads, 0, compute_.get()>>>(rows, cols, x.data(),
                                                                 out->data());
    return ToStatus(cudaGetLastError(), "SumRows kernel launch");
  }

  Status SoftmaxCrossEntropy(size_t rows, size_t classes, const DeviceBuffer& logits,
                             const int32_t* labels, DeviceBuffer* probs, DeviceBuffer* grad,
                             float* loss) override {
    PS_RETURN_IF_ERROR(CheckSoftmaxArgs(rows, classes, logits, labels, probs, grad, loss));
    const size_t threads = rows * 32;
    const size_t blocks = (threads + kThreads - 1) / kThreads;
    if (blocks > static_cast<size_t>(INT_MAX)) {
      return InvalidArgumentError("cuda SoftmaxCrossEntropy: too many rows");
    }
    PS_RETURN_IF_ERROR(Compute({&logits}, {probs, grad}));
    PS_ASSIGN_OR_RETURN(const int32_t* device_labels,
                        labels_.Put(labels, rows, compute_.get(), "cudaMemcpyAsync (labels)"));
    PS_ASSIGN_OR_RETURN(void* row_loss, losses_.Get(rows * sizeof(float), compute_.get()));
    SoftmaxCrossEntropyKernel<<<static_cast<unsigned>(blocks), kThreads, 0, compute_.get()>>>(
        rows, classes, logits.data(), device_labels, probs->data(),
        grad == nullptr ? nullptr : grad->data(), static_cast<float*>(row_loss));
    PS_RETURN_IF_ERROR(ToStatus(cudaGetLastError(), "SoftmaxCrossEntropy kernel launch"));
    return MeanAtSynchronize(row_loss, rows, loss);
  }

  Status GatherRows(size_t rows, size_t cols, const DeviceBuffer& table, const uint32_t* index,
                    size_t m, DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(
        CheckIndexedRowsArgs("GatherRows", rows, cols, &table, index, m, out, "out"));
    if (m == 0 || cols == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({&table}, {out}));
    PS_ASSIGN_OR_RETURN(
        const uint32_t* device_index,
        index_.Put(index, m, compute_.get(), "cudaMemcpyAsync (GatherRows index)"));
    GatherRowsKernel<<<Blocks(m * cols), kThreads, 0, compute_.get()>>>(
        m, cols, table.data(), device_index, out->data());
    return ToStatus(cudaGetLastError(), "GatherRows kernel launch");
  }

  Status ScatterAddRows(size_t m, size_t cols, const DeviceBuffer& src, const uint32_t* index,
                        size_t rows, DeviceBuffer* table) override {
    PS_RETURN_IF_ERROR(
        CheckIndexedRowsArgs("ScatterAddRows", rows, cols, table, index, m, &src, "src"));
    if (m == 0 || cols == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({&src}, {table}));
    PS_ASSIGN_OR_RETURN(
        const uint32_t* device_index,
        index_.Put(index, m, compute_.get(), "cudaMemcpyAsync (ScatterAddRows index)"));
    ScatterAddRowsKernel<<<Blocks(m * cols), kThreads, 0, compute_.get()>>>(
        m, cols, src.data(), device_index, table->data());
    return ToStatus(cudaGetLastError(), "ScatterAddRows kernel launch");
  }

  Status RowDots(size_t m, size_t cols, const DeviceBuffer& a, const DeviceBuffer& b,
                 DeviceBuffer* out) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&a, m * cols, "RowDots", "A"));
    PS_RETURN_IF_ERROR(CheckBuffer(&b, m * cols, "RowDots", "B"));
    PS_RETURN_IF_ERROR(CheckBuffer(out, m, "RowDots", "out"));
    if (m == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({&a, &b}, {out}));
    RowDotsKernel<<<Blocks(m * 32), kThreads, 0, compute_.get()>>>(m, cols, a.data(), b.data(),
                                                                   out->data());
    return ToStatus(cudaGetLastError(), "RowDots kernel launch");
  }

  Status ScaleRows(size_t m, size_t cols, const DeviceBuffer& scale, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(&scale, m, "ScaleRows", "scale"));
    PS_RETURN_IF_ERROR(CheckBuffer(x, m * cols, "ScaleRows", "X"));
    if (m == 0 || cols == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({&scale}, {x}));
    ScaleRowsKernel<<<Blocks(m * cols), kThreads, 0, compute_.get()>>>(m, cols, scale.data(),
                                                                       x->data());
    return ToStatus(cudaGetLastError(), "ScaleRows kernel launch");
  }

  Status Fill(size_t n, float value, DeviceBuffer* x) override {
    PS_RETURN_IF_ERROR(CheckBuffer(x, n, "Fill", "x"));
    if (n == 0) return Status::Ok();
    PS_RETURN_IF_ERROR(Compute({}, {x}));
    FillKernel<<<Blocks(n), kThreads, 0, compute_.get()>>>(n, value, x->data());
    return ToStatus(cudaGetLastError(), "Fill kernel launch");
  }

  Status CsrMatVec(Transpose trans, size_t rows, size_t cols, const uint64_t* row_offsets,
                   const uint32_t* col_index, const DeviceBuffer& x, DeviceBuffer* y) override {
    PS_RETURN_IF_ERROR(CheckCsrArgs(trans, rows, cols, row_offsets, col_index, x, y));
    const bool t = trans == Transpose::kYes;
    PS_RETURN_IF_ERROR(Compute({&x}, {y}));
    if (t && cols > 0) {
      // The column sums accumulate into y, so it starts at zero (all-zero
      // bytes are 0.0f).
      PS_RETURN_IF_ERROR(
          ToStatus(cudaMemsetAsync(y->data(), 0, cols * sizeof(float), compute_.get()),
                   "cudaMemsetAsync (CsrMatVec y)"));
    }
    if (rows == 0) return Status::Ok();
    const uint64_t nnz = row_offsets[rows];
    PS_ASSIGN_OR_RETURN(const uint64_t* device_offsets,
                        offsets_.Put(row_offsets, rows + 1, compute_.get(),
                                     "cudaMemcpyAsync (CsrMatVec row_offsets)"));
    PS_ASSIGN_OR_RETURN(const uint32_t* device_cols,
                        index_.Put(col_index, static_cast<size_t>(nnz), compute_.get(),
                                   "cudaMemcpyAsync (CsrMatVec col_index)"));
    if (t) {
      if (nnz == 0) return Status::Ok();
      CsrColumnSumsKernel<<<Blocks(rows * 32), kThreads, 0, compute_.get()>>>(
          rows, device_offsets, device_cols, x.data(), y->data());
      return ToStatus(cudaGetLastError(), "CsrMatVec (transposed) kernel launch");
    }
    CsrRowSumsKernel<<<Blocks(rows * 32), kThreads, 0, compute_.get()>>>(
        rows, device_offsets, device_cols, x.data(), y->data());
    return ToStatus(cudaGetLastError(), "CsrMatVec kernel launch");
  }

  Status LogisticLoss(size_t n, const DeviceBuffer& logits, const int32_t* labels,
                      DeviceBuffer* grad, float* loss) override {
    PS_RETURN_IF_ERROR(CheckLogisticArgs(n, logits, labels, grad, loss));
    PS_RETURN_IF_ERROR(Compute({&logits}, {grad}));
    PS_ASSIGN_OR_RETURN(const int32_t* device_labels,
                        labels_.Put(labels, n, compute_.get(), "cudaMemcpyAsync (labels)"));
    PS_ASSIGN_OR_RETURN(void* element_loss, losses_.Get(n * sizeof(float), compute_.get()));
    LogisticLossKernel<<<Blocks(n), kThreads, 0, compute_.get()>>>(
        n, logits.data(), device_labels, grad == nullptr ? nullptr : grad->data(),
        static_cast<float*>(element_loss));
    PS_RETURN_IF_ERROR(ToStatus(cudaGetLastError(), "LogisticLoss kernel launch"));
    return MeanAtSynchronize(element_loss, n, loss);
  }

 private:
  // A buffer's bytes [begin, end) in device memory.
  struct Range {
    uintptr_t begin = 0, end = 0;
    bool Overlaps(const Range& o) const { return begin < o.end && o.begin < end; }
  };
  static Range RangeOf(const DeviceBuffer& buffer, size_t floats) {
    const auto begin = reinterpret_cast<uintptr_t>(buffer.data());
    return {begin, begin + floats * sizeof(float)};
  }
  // An asynchronous copy not yet waited for, and the event after it.
  struct Pending {
    Range range;
    cudaEvent_t done = nullptr;
  };
  // A timed stretch of one stream: its events and the total it adds to.
  struct Span {
    cudaEvent_t start = nullptr, end = nullptr;
    double* total = nullptr;
  };
  // A loss to write at Synchronize: the mean of `count` floats at
  // loss_host_[first].
  struct PendingLoss {
    size_t first = 0, count = 0;
    float* loss = nullptr;
  };

  // Closes the open run of compute and waits for the three streams; the
  // first error.
  Status WaitForStreams() {
    const Status closed = EndCompute();
    const Status compute = ToStatus(cudaStreamSynchronize(compute_.get()), "cudaStreamSynchronize");
    const Status upload = ToStatus(cudaStreamSynchronize(upload_.get()), "cudaStreamSynchronize");
    const Status download =
        ToStatus(cudaStreamSynchronize(download_.get()), "cudaStreamSynchronize");
    for (const Status* st : {&closed, &compute, &upload, &download}) {
      if (!st->ok()) return *st;
    }
    return Status::Ok();
  }

  // Adds each finished span's time to its total.
  Status AddSpanTimes() {
    for (const Span& span : spans_) {
      float ms = 0;
      PS_RETURN_IF_ERROR(
          ToStatus(cudaEventElapsedTime(&ms, span.start, span.end), "cudaEventElapsedTime"));
      *span.total += ms / 1000.0;
    }
    return Status::Ok();
  }

  // An event of the pool, free until the next Synchronize.
  StatusOr<cudaEvent_t> NextEvent() {
    if (events_used_ == events_.size()) {
      Event e;
      PS_RETURN_IF_ERROR(CreateEvent(&e));
      events_.push_back(std::move(e));
    }
    return events_[events_used_++].get();
  }

  // `waiter` waits for the work queued on `stream` so far.
  Status StreamWaitsFor(cudaStream_t waiter, cudaStream_t stream) {
    PS_ASSIGN_OR_RETURN(cudaEvent_t e, NextEvent());
    PS_RETURN_IF_ERROR(ToStatus(cudaEventRecord(e, stream), "cudaEventRecord"));
    return ToStatus(cudaStreamWaitEvent(waiter, e, 0), "cudaStreamWaitEvent");
  }

  // `stream` waits for each copy in *pending over `range`. When the compute
  // stream waits, those copies are no longer pending: what is queued on it
  // later runs after them. A copy stream's wait leaves them pending.
  Status WaitForOverlapping(std::vector<Pending>* pending, const Range& range,
                            cudaStream_t stream) {
    const bool compute = stream == compute_.get();
    for (size_t i = 0; i < pending->size();) {
      if (!(*pending)[i].range.Overlaps(range)) {
        ++i;
        continue;
      }
      if (compute) PS_RETURN_IF_ERROR(EndCompute());
      PS_RETURN_IF_ERROR(
          ToStatus(cudaStreamWaitEvent(stream, (*pending)[i].done, 0), "cudaStreamWaitEvent"));
      if (!compute) {
        ++i;
        continue;
      }
      (*pending)[i] = pending->back();
      pending->pop_back();
    }
    return Status::Ok();
  }

  Status In(const DeviceBuffer& buffer) {
    return WaitForOverlapping(&pending_uploads_, RangeOf(buffer, buffer.size()), compute_.get());
  }
  Status Out(const DeviceBuffer& buffer) {
    PS_RETURN_IF_ERROR(In(buffer));
    return WaitForOverlapping(&pending_downloads_, RangeOf(buffer, buffer.size()),
                              compute_.get());
  }

  // Before a compute op: waits for the copies its buffers need (null
  // entries skipped), then opens a timed run of compute if none is open.
  Status Compute(std::initializer_list<const DeviceBuffer*> inputs,
                 std::initializer_list<const DeviceBuffer*> outputs) {
    for (const DeviceBuffer* b : inputs) {
      if (b != nullptr) PS_RETURN_IF_ERROR(In(*b));
    }
    for (const DeviceBuffer* b : outputs) {
      if (b != nullptr) PS_RETURN_IF_ERROR(Out(*b));
    }
    compute_dirty_ = true;
    if (open_compute_span_) return Status::Ok();
    PS_ASSIGN_OR_RETURN(compute_span_, BeginSpan(compute_.get(), &times_.compute_s));
    open_compute_span_ = true;
    return Status::Ok();
  }

  // Closes the open run of compute, if any (before the compute stream
  // waits, or copies).
  Status EndCompute() {
    if (!open_compute_span_) return Status::Ok();
    open_compute_span_ = false;
    return EndSpan(compute_span_, compute_.get());
  }

  // Starts a span on `stream` that adds to *total; returns its index.
  StatusOr<size_t> BeginSpan(cudaStream_t stream, double* total) {
    PS_ASSIGN_OR_RETURN(cudaEvent_t start, NextEvent());
    PS_RETURN_IF_ERROR(ToStatus(cudaEventRecord(start, stream), "cudaEventRecord"));
    spans_.push_back({start, nullptr, total});
    return spans_.size() - 1;
  }
  Status EndSpan(size_t span, cudaStream_t stream) {
    PS_ASSIGN_OR_RETURN(cudaEvent_t end, NextEvent());
    spans_[span].end = end;
    return ToStatus(cudaEventRecord(end, stream), "cudaEventRecord");
  }

  // *loss = the mean of `n` floats at `device` (per-row losses), written at
  // the next Synchronize: the floats are copied into page-locked memory on
  // the compute stream, and the mean is taken on the host in double.
  Status MeanAtSynchronize(const void* device, size_t n, float* loss) {
    const size_t first = pending_losses_.empty()
                             ? 0
                             : pending_losses_.back().first + pending_losses_.back().count;
    if (first + n > loss_capacity_) {
      // Rare (a larger batch): what is pending is written first.
      PS_RETURN_IF_ERROR(Synchronize());
      if (n > loss_capacity_) {
        void* p = nullptr;
        loss_pinned_.reset();
        loss_capacity_ = 0;
        PS_RETURN_IF_ERROR(
            ToStatus(cudaMallocHost(&p, 2 * n * sizeof(float)), "cudaMallocHost (losses)"));
        loss_pinned_.reset(p);
        loss_capacity_ = 2 * n;
        loss_host_ = static_cast<float*>(p);
      }
      return MeanAtSynchronize(device, n, loss);
    }
    PS_RETURN_IF_ERROR(ToStatus(cudaMemcpyAsync(loss_host_ + first, device, n * sizeof(float),
                                                cudaMemcpyDeviceToHost, compute_.get()),
                                "cudaMemcpyAsync (losses)"));
    pending_losses_.push_back({first, n, loss});
    return Status::Ok();
  }

  const int device_;
  const std::string device_name_;
  const cublasHandle_t handle_;
  const Stream compute_, upload_, download_;
  Scratch labels_;   // int32 labels of SoftmaxCrossEntropy and LogisticLoss
  Scratch losses_;   // per-row (per-element) losses before their mean
  Scratch index_;    // uint32 row indices, CSR column indices
  Scratch offsets_;  // uint64 CSR row offsets
  PinnedMemory loss_pinned_;  // per-row losses on their way to the host
  float* loss_host_ = nullptr;
  size_t loss_capacity_ = 0;  // floats
  std::vector<PendingLoss> pending_losses_;
  std::vector<Pending> pending_uploads_, pending_downloads_;
  bool compute_dirty_ = false;  // compute queued since the last Synchronize
  std::vector<Event> events_;   // the pool; [0, events_used_) are in use
  size_t events_used_ = 0;
  std::vector<Span> spans_;
  bool open_compute_span_ = false;
  size_t compute_span_ = 0;
  DeviceTimes times_;
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
  Stream compute, upload, download;
  PS_RETURN_IF_ERROR(CreateStream(&compute));
  PS_RETURN_IF_ERROR(CreateStream(&upload));
  PS_RETURN_IF_ERROR(CreateStream(&download));
  cublasHandle_t handle = nullptr;
  PS_RETURN_IF_ERROR(ToStatus(cublasCreate(&handle), "cublasCreate"));
  // Full FP32 products: TF32 would break the parity the tests hold to.
  const Status math = ToStatus(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  const Status stream =
      math.ok() ? ToStatus(cublasSetStream(handle, compute.get()), "cublasSetStream") : math;
  if (!stream.ok()) {
    (void)cublasDestroy(handle);
    return stream;
  }
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(
      device, prop.name, handle, std::move(compute), std::move(upload), std::move(download)));
}

}  // namespace ps::cuda
