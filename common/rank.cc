#include "common/rank.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "common/text.h"

namespace ps {
namespace {

// The environment's sources in precedence order (see the header); `world`:
// a rank shared by the servers and the workers, which takes the offset.
struct EnvSource {
  const char* var;
  bool world;
};
constexpr EnvSource kEnvSources[] = {{"OMPI_COMM_WORLD_RANK", true},
                                     {"PMI_RANK", true},
                                     {"SLURM_PROCID", true},
                                     {"JOB_COMPLETION_INDEX", false}};

// Decimal digits only: a launcher writes "3", never "+3", " 3" or "-1", so
// anything else is a mistake worth stopping for.
std::optional<uint64_t> ParseIndex(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// "valid: 0..N-1, cluster.servers lists N": the range and where it comes from.
std::string ValidRange(uint32_t limit, const std::string& what) {
  const std::string count = what == "shard" ? "cluster.servers lists " + std::to_string(limit)
                                            : "cluster.workers is " + std::to_string(limit);
  return "valid: 0.." + std::to_string(limit - 1) + ", " + count;
}

std::string FlagHint(const std::string& what) { return "pass --" + what + " N"; }

// The rank in a StatefulSet pod's name "<set>-<ordinal>" (the first label
// of the name, should the kernel's name be a full one).
StatusOr<uint64_t> HostnameOrdinal(const std::string& hostname, uint32_t limit,
                                   const std::string& what) {
  const std::string_view label = std::string_view(hostname).substr(0, hostname.find('.'));
  const size_t dash = label.rfind('-');
  std::optional<uint64_t> ordinal;
  if (dash != std::string_view::npos && dash > 0) ordinal = ParseIndex(label.substr(dash + 1));
  if (!ordinal) {
    return InvalidArgumentError(
        what + ": --" + what + "-from-hostname: host name " + Quote(hostname) +
        " does not end in \"-<ordinal>\" as a StatefulSet pod's does (\"<set>-3\" is " + what +
        " 3; " + ValidRange(limit, what) + "); run it in such a pod, or drop --" + what +
        "-from-hostname and " + FlagHint(what));
  }
  return *ordinal;
}

}  // namespace

StatusOr<ResolvedRank> ResolveRank(const RankSources& sources, uint32_t limit,
                                   const std::string& what) {
  uint64_t value = 0;
  std::string source;
  if (sources.flag.has_value() && sources.hostname.has_value()) {
    return InvalidArgumentError(what + ": pass either --" + what + " or --" + what +
                                "-from-hostname, not both");
  }
  if (sources.flag.has_value()) {
    if (*sources.flag < 0) {
      return InvalidArgumentError(what + " " + std::to_string(*sources.flag) + " (from --" + what +
                                  ") is negative (" + ValidRange(limit, what) + ")");
    }
    value = static_cast<uint64_t>(*sources.flag);
    source = "--" + what;
  } else if (sources.hostname.has_value()) {
    PS_ASSIGN_OR_RETURN(value, HostnameOrdinal(*sources.hostname, limit, what));
    source = "host name " + Quote(*sources.hostname);
  } else {
    for (const auto& [var, world] : kEnvSources) {
      const char* text = std::getenv(var);
      if (text == nullptr) continue;
      const std::string shown = std::string(var) + "=" + Quote(text);
      std::optional<uint64_t> parsed = ParseIndex(text);
      if (!parsed) {
        return InvalidArgumentError(what + ": environment variable " + shown +
                                    " is not a non-negative integer (" + ValidRange(limit, what) +
                                    "); fix or unset it, or " + FlagHint(what));
      }
      if (world && *parsed < sources.world_offset) {
        return InvalidArgumentError(
            what + ": environment variable " + shown + " is below the offset " +
            std::to_string(sources.world_offset) + " (world ranks 0.." +
            std::to_string(sources.world_offset - 1) +
            " are the servers'); start the servers first in the launcher's command "
            "(mpirun -np <servers> ps_server : -np <workers> ps_worker), or " +
            FlagHint(what));
      }
      value = world ? *parsed - sources.world_offset : *parsed;
      source = "environment variable " + shown;
      if (world && sources.world_offset != 0) {
        source += " minus offset " + std::to_string(sources.world_offset);
      }
      break;
    }
    if (source.empty()) {
      return InvalidArgumentError(
          "no " + what + " given: " + FlagHint(what) + " or --" + what +
          "-from-hostname (in a StatefulSet pod), or run under mpirun/srun "
          "(OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID) or in a Kubernetes Indexed Job "
          "(JOB_COMPLETION_INDEX)");
    }
  }
  if (value >= limit) {
    return InvalidArgumentError(
        what + " " + std::to_string(value) + " (from " + source + ") is out of range (" +
        ValidRange(limit, what) +
        "); start as many processes as the job file names (mpirun -np, srun -n, the Job's "
        "completions, the StatefulSet's replicas), or fix the job file");
  }
  return ResolvedRank{.rank = static_cast<uint32_t>(value), .source = std::move(source)};
}

StatusOr<std::string> LocalHostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) {
    return InternalError(std::string("gethostname failed: ") + std::strerror(errno));
  }
  return std::string(name);
}

StatusOr<ResolvedRank> ResolveRankFromFlags(const RankFlags& flags, uint32_t world_offset,
                                            uint32_t limit, const std::string& what) {
  RankSources sources;
  sources.flag = flags.value;
  sources.world_offset = world_offset;
  if (flags.from_hostname) {
    StatusOr<std::string> hostname = LocalHostName();
    if (!hostname.ok()) {
      return InternalError("--" + what + "-from-hostname: " + hostname.status().message());
    }
    sources.hostname = *std::move(hostname);
  }
  return ResolveRank(sources, limit, what);
}

}  // namespace ps
