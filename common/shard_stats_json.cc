// The JSON view of ShardStats: the only file in common/ that includes
// nlohmann/json. Its exceptions end here, as InvalidArgument.
#include <exception>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/shard_stats.h"

// An absent or null field reads as std::nullopt; a present one as its value.
template <typename T>
struct nlohmann::adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& value) {
    if (value) {
      j = *value;
    } else {
      j = nullptr;
    }
  }
  static void from_json(const json& j, std::optional<T>& value) {
    if (j.is_null()) {
      value.reset();
    } else {
      value = j.get<T>();
    }
  }
};

namespace ps {

// The field lists: the JSON names are the struct's.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::Worker, clock, target, silent_ms,
                                                late_pushes, cache_hits, cache_misses, dead, left)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::BackupWorkers, backup_workers, quorum,
                                                late_pushes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::Checkpoint, enabled, dir, last_clock,
                                                writing, started, requests_waiting)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::Evaluator, state, silent_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::Replication::Backup, replica, state,
                                                acked)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::Replication, factor, epoch, last_seq,
                                                committed, backups)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::Primary, epoch, accepting,
                                                fenced_refusals)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::BackupReplica, replica, applied,
                                                refused, started_clock)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::Checksum, table, value)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShardStats::Table, name, rows, dim, owned_begin,
                                                owned_end, non_finite_rows, refused_rows, keys,
                                                stored_rows, max_rows, stored_bytes,
                                                dropped_rows, unadmitted_rows, sketch_bytes,
                                                evicted_rows, expired_rows)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(
    ShardStats, shard, endpoint, uptime_s, pushes, pulls, errors, clocks, bytes_in, bytes_out,
    copy_on_write, pushes_per_s, pulls_per_s, consistency, min_clock, slowest_worker,
    waiting_pulls, pulls_waited, max_blocked_lead, workers, backup_workers, started_clock,
    map_epoch, handover_clock, reshard_followers, reshard_followers_ready,
    lost_clocks, repeated_pushes, resumes, refused_clocks, refused_results, refused_sum_clocks,
    max_resume_clocks, refusals_not_logged, sum_clocks, sum_bytes, parked_pushes,
    parked_push_bytes, queued_reply_bytes, max_connection_bytes, connections_queued,
    max_queued_reply_bytes, pulls_refused_queued_bytes, pulls_refused_waiting, replies_dropped,
    connections_open, connections_refused, max_connections, checkpoint, evaluator, failed,
    replication, checksums, primary, backup, rss_bytes, values_bytes, security,
    refused_handshakes, failed_handshakes, refused_requests, tables)

std::string ShardStatsJson(const ShardStats& stats) {
  // Invalid UTF-8 in a name (a table, a failure message) is replaced, not thrown.
  return nlohmann::json(stats).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

StatusOr<ShardStats> ParseShardStatsJson(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InvalidArgumentError("STATS report is not a JSON object (" +
                                std::to_string(json.size()) +
                                " bytes); is the shard of the same version as this tool?");
  }
  try {
    return j.get<ShardStats>();
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("STATS report has a field of the wrong type: ") +
                                e.what());
  }
}

}  // namespace ps
