#include "common/rank.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

namespace ps {

StatusOr<uint32_t> ResolveRank(std::optional<int64_t> flag, uint32_t env_offset, uint32_t limit,
                               const std::string& what) {
  int64_t value = 0;
  std::string source;
  if (flag.has_value()) {
    value = *flag;
    source = "--" + what;
  } else {
    for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
      const char* v = std::getenv(var);
      if (v == nullptr) continue;
      std::string_view text(v);
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || ptr != text.data() + text.size()) {
        return InvalidArgumentError(std::string("environment variable ") + var + "='" + v +
                                    "' is not an integer rank");
      }
      value -= env_offset;
      source = std::string("environment variable ") + var +
               (env_offset ? " minus offset " + std::to_string(env_offset) : "");
      break;
    }
    if (source.empty()) {
      return InvalidArgumentError("no " + what + " given: pass --" + what +
                                  " N or run under mpirun/srun (OMPI_COMM_WORLD_RANK, PMI_RANK, "
                                  "SLURM_PROCID)");
    }
  }
  if (value < 0 || value >= limit) {
    return InvalidArgumentError(what + " " + std::to_string(value) + " (from " + source +
                                ") is out of range: the job has " + std::to_string(limit) +
                                " (valid: 0.." + std::to_string(limit - 1) + ")");
  }
  return static_cast<uint32_t>(value);
}

}  // namespace ps
