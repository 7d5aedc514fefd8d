// CudaBackend: the Backend on an NVIDIA GPU, with cuBLAS for the matrix
// products and small kernels for the element-wise ops, the row gathers and
// scatter-adds, the sparse (CSR) products and the losses; scatter-adds and
// transposed CSR products add with atomicAdd. Device memory is owned by the
// DeviceBuffers, except for scratch the backend keeps for what ops bring
// from the host (indices, labels) and grows to the largest request. Compute
// runs on one stream, and UploadAsync and DownloadAsync on two copy streams
// beside it, ordered by events (see CudaBackend in the .cu); Download and
// Synchronize wait for all three.
//
// This header includes no CUDA header, so host code built without the
// toolkit's include path can call it; cuda_backend.cu is the only file that
// includes cuda_runtime.h and cublas_v2.h, and it converts every
// cudaError_t and cublasStatus_t into a ps::Status in one place.
// Thread-compatible, like every Backend.
#ifndef PS_WORKER_CUDA_CUDA_BACKEND_H_
#define PS_WORKER_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/backend.h"

namespace ps::cuda {

// Number of CUDA devices visible to this process. Returns 0, with `*why`
// saying why (no driver, driver too old, no device, ...), instead of failing.
// REQUIRES: why != nullptr.
int DeviceCount(std::string* why);

// A backend on `device`. Internal when the device cannot be selected or
// cuBLAS cannot be initialised; the message carries the CUDA error.
StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

}  // namespace ps::cuda

#endif  // PS_WORKER_CUDA_CUDA_BACKEND_H_
