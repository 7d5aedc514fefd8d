// Where a process learns its rank (shard index or worker rank): a command
// line flag, or the environment of the launcher that started it (mpirun,
// Slurm, PMI), so the same binaries run under any of them.
#ifndef PS_COMMON_RANK_H_
#define PS_COMMON_RANK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace ps {

// Returns `flag` when set; else the first of OMPI_COMM_WORLD_RANK, PMI_RANK,
// SLURM_PROCID that is set, minus `env_offset` (under `mpirun -np 2
// ps_server : -np 4 ps_worker` workers see ranks 2..5: pass offset 2).
// Checks the result is < `limit`. InvalidArgument naming the source when it
// is missing, not a number, or out of range.
StatusOr<uint32_t> ResolveRank(std::optional<int64_t> flag, uint32_t env_offset, uint32_t limit,
                               const std::string& what);

}  // namespace ps

#endif  // PS_COMMON_RANK_H_
