// Which compute backend a worker computes on (worker.device): the factory
// over every Backend this build has (worker/cpu_backend.h and, when the CUDA
// toolkit was found at configure time, worker/cuda/cuda_backend.h). Kept
// apart from worker/backend.h, the interface those backends implement, so
// that the interface depends on none of them.
//
// Thread-safe: the calls keep no state of their own.
#ifndef PS_WORKER_BACKEND_FACTORY_H_
#define PS_WORKER_BACKEND_FACTORY_H_

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "worker/backend.h"

namespace ps {

// Number of CUDA devices this process can use: 0 when the CUDA backend was
// not built, there is no driver or no device. Never fails or aborts.
int CudaDeviceCount();

// Creates a backend and logs which one and why. kCuda without a usable
// device (or in a build without the CUDA backend) is FailedPrecondition
// naming the reason; a CUDA initialisation failure is Internal.
// cpu_threads: the CPU backend's BLAS threads (CreateCpuBackend).
StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, uint32_t cpu_threads = 0);

}  // namespace ps

#endif  // PS_WORKER_BACKEND_FACTORY_H_
