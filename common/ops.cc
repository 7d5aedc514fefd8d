#include "common/ops.h"

namespace ps {

std::string OpName(Op op) {
  if (KnownOp(op)) return Traits(op).name;
  return "OP(" + std::to_string(static_cast<int>(op)) + ")";
}

}  // namespace ps
