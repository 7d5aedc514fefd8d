#include "worker/backend.h"

#include <string>

namespace ps {

std::string BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

StatusOr<BackendKind> ParseBackendKind(std::string_view name) {
  if (name == "auto") return BackendKind::kAuto;
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return InvalidArgumentError("unknown backend '" + std::string(name) +
                              "': expected auto, cpu or cuda");
}

}  // namespace ps
