// Where a process learns its rank (shard index or worker rank): a command
// line flag, or what the launcher that started it provides (mpirun, Slurm,
// PMI, a Kubernetes Indexed Job, a StatefulSet pod's host name), so the
// same binaries run under any of them.
//
// Precedence, first found wins:
//   1. the flag (--shard N, --rank N);
//   2. the host name's ordinal, only when asked for (--shard-from-hostname,
//      --rank-from-hostname): a StatefulSet pod is named "<set>-<ordinal>"
//      ("ps-server-3" -> 3);
//   3. a world rank: OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, minus the
//      world offset (under `mpirun -np 2 ps_server : -np 4 ps_worker` the
//      workers see world ranks 2..5: their offset is the server count);
//   4. JOB_COMPLETION_INDEX (a Kubernetes Indexed Job's pod index).
//
// Why the host name is never read unless asked for: every host has a name,
// and an ordinary one ("node-12", "gpu-3") ends in digits too; taking it by
// default would give a process a rank that no launcher meant, silently. The
// flag is per process (not an environment variable a whole pod or shell
// passes on to everything it starts).
//
// Why world ranks come before JOB_COMPLETION_INDEX: the index belongs to a
// pod, a world rank to one process. When mpirun or srun runs inside an
// Indexed Job's pod, every process it starts inherits the pod's index and
// gets its own world rank; the world rank is the one that tells them apart.
//
// Only world ranks take the offset: a job's servers and workers share one
// numbering there, while an Indexed Job's index and a pod ordinal count the
// pods of one role (the servers' Job or set, the workers' Job) from 0.
#ifndef PS_COMMON_RANK_H_
#define PS_COMMON_RANK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace ps {

// What ResolveRank may take the rank from, besides the environment.
struct RankSources {
  // The rank given on the command line (--shard, --rank), if any.
  std::optional<int64_t> flag;
  // The host name whose ordinal is the rank, when the process was asked to
  // use it (LocalHostName() under --shard-from-hostname); unset, the host
  // name is not a source.
  std::optional<std::string> hostname;
  // Subtracted from a world rank (OMPI_COMM_WORLD_RANK, PMI_RANK,
  // SLURM_PROCID); no other source takes it. The workers' offset is the
  // server count, the servers' 0.
  uint32_t world_offset = 0;
};

struct ResolvedRank {
  uint32_t rank = 0;
  // Where it came from, for logs and --check: "--shard", "host name
  // \"ps-server-3\"", "OMPI_COMM_WORLD_RANK=7 minus offset 2",
  // "JOB_COMPLETION_INDEX=1".
  std::string source;
};

// The rank from the first source of the precedence above that is present,
// checked to be < `limit` (the job's server or worker count). `what` names
// it in messages and flags: "shard" (--shard, --shard-from-hostname) or
// "rank". Reads the environment (getenv) on each call.
//
// InvalidArgument, naming the source and the value, the valid range and
// what to do, when:
//   - both a flag and a host name are given (pass one);
//   - the host name does not end in "-<ordinal>";
//   - an environment variable is set but is not a non-negative decimal
//     integer;
//   - a world rank is below the offset (that world rank is a server's);
//   - the rank is >= `limit`;
//   - no source is present.
// REQUIRES: limit >= 1.
StatusOr<ResolvedRank> ResolveRank(const RankSources& sources, uint32_t limit,
                                   const std::string& what);

// This machine's (or pod's) host name as the kernel reports it
// (gethostname; Kubernetes sets a pod's to the pod's name). Internal on
// failure.
StatusOr<std::string> LocalHostName();

// The command line flags that give a rank: --<what> N and
// --<what>-from-hostname.
struct RankFlags {
  std::optional<int64_t> value;
  bool from_hostname = false;
};

// Declares the RankFlags on a CLI11 app (a template, so common does not
// include CLI11): "--shard" and "--shard-from-hostname" for `what` "shard".
// `pod_example` is a pod name of that role, for the help ("ps-server-3").
// `flags` must outlive the parse.
template <typename App>
void AddRankFlags(App& app, const std::string& what, const std::string& default_help,
                  const std::string& pod_example, RankFlags* flags) {
  app.add_option("--" + what, flags->value,
                 what + " (default: " + default_help + "; see common/rank.h)");
  app.add_flag("--" + what + "-from-hostname", flags->from_hostname,
               "take the " + what + " from the host name's ordinal, as in a StatefulSet pod (\"" +
                   pod_example + "\" is " + what + " " +
                   pod_example.substr(pod_example.rfind('-') + 1) +
                   "); never done unless asked for");
}

// ResolveRank over what the flags say: `flags.value` and, under
// `flags.from_hostname`, LocalHostName(). Errors: ResolveRank's, and
// Internal "--<what>-from-hostname: ..." when the host name cannot be read.
StatusOr<ResolvedRank> ResolveRankFromFlags(const RankFlags& flags, uint32_t world_offset,
                                            uint32_t limit, const std::string& what);

}  // namespace ps

#endif  // PS_COMMON_RANK_H_
