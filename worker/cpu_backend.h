// CpuBackend: the Backend on host memory, with OpenBLAS (cblas) for the
// matrix products and plain loops for the element-wise and sparse ops
// (gathers, scatter-adds, CSR products, losses). The only file
// that includes <cblas.h> is cpu_backend.cc.
// Thread-compatible, like every Backend.
#ifndef PS_WORKER_CPU_BACKEND_H_
#define PS_WORKER_CPU_BACKEND_H_

#include <cstdint>
#include <memory>

#include "worker/backend.h"

namespace ps {

// Never fails; a unique_ptr<Backend> so callers hold every backend alike.
// threads > 0 sets OpenBLAS's thread count (process-wide: OpenBLAS has one
// pool); 0 leaves it as it is (OPENBLAS_NUM_THREADS, else every core).
std::unique_ptr<Backend> CreateCpuBackend(uint32_t threads = 0);

}  // namespace ps

#endif  // PS_WORKER_CPU_BACKEND_H_
