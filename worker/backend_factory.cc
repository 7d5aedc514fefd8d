#include "worker/backend_factory.h"

#include <string>

#include "common/logging.h"
#include "worker/cpu_backend.h"
#ifdef PS_WITH_CUDA
#include "worker/cuda/cuda_backend.h"
#endif

namespace ps {
namespace {

// The number of usable CUDA devices, or 0 with *why saying why there are none.
int CountCudaDevices(std::string* why) {
#ifdef PS_WITH_CUDA
  return cuda::DeviceCount(why);
#else
  *why = "this build has no CUDA backend (the CUDA toolkit was not found at configure time)";
  return 0;
#endif
}

StatusOr<std::unique_ptr<Backend>> CreateCuda() {
#ifdef PS_WITH_CUDA
  return cuda::CreateCudaBackend(/*device=*/0);
#else
  return FailedPreconditionError("CUDA backend not built");
#endif
}

}  // namespace

int CudaDeviceCount() {
  std::string why;
  return CountCudaDevices(&why);
}

StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, uint32_t cpu_threads) {
  std::string why;
  switch (kind) {
    case BackendKind::kCpu: {
      auto backend = CreateCpuBackend(cpu_threads);
      PS_LOG_INFO("compute backend: {} (requested cpu)", backend->name());
      return backend;
    }
    case BackendKind::kCuda: {
      if (CountCudaDevices(&why) == 0) {
        return FailedPreconditionError("device cuda requested but no CUDA device is usable: " +
                                       why + "; use device auto or cpu");
      }
      PS_ASSIGN_OR_RETURN(auto backend, CreateCuda());
      PS_LOG_INFO("compute backend: {} (requested cuda)", backend->name());
      return backend;
    }
    case BackendKind::kAuto: {
      const int devices = CountCudaDevices(&why);
      if (devices > 0) {
        PS_ASSIGN_OR_RETURN(auto backend, CreateCuda());
        PS_LOG_INFO("compute backend: {} (auto: {} CUDA device(s) found, using device 0)",
                    backend->name(), devices);
        return backend;
      }
      auto backend = CreateCpuBackend(cpu_threads);
      PS_LOG_INFO("compute backend: {} (auto: no GPU here, using the CPU: {})", backend->name(),
                  why);
      return backend;
    }
  }
  return InvalidArgumentError("CreateBackend: unknown BackendKind " +
                              std::to_string(static_cast<int>(kind)));
}

}  // namespace ps
