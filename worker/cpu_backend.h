// CpuBackend: the Backend on host memory, with OpenBLAS (cblas) for the
// matrix products and plain loops for the element-wise and sparse ops
// (gathers, scatter-adds, CSR products, losses). The only file
// that includes <cblas.h> is cpu_backend.cc.
// Thread-compatible, like every Backend.
#ifndef PS_WORKER_CPU_BACKEND_H_
#define PS_WORKER_CPU_BACKEND_H_

#include <memory>

#include "worker/backend.h"

namespace ps {

// Never fails; a unique_ptr<Backend> so callers hold every backend alike.
std::unique_ptr<Backend> CreateCpuBackend();

}  // namespace ps

#endif  // PS_WORKER_CPU_BACKEND_H_
