// The text view of ShardStats. Scripts, tests and people read these lines
// by their words ("worker_clocks 3 4", "last_clock N writing 0"), so the
// words and their order stay as they are; new facts go at the end of a
// line or on a line of their own.
#include "common/shard_stats.h"

#include <ios>
#include <sstream>

#include "common/wire.h"

namespace ps {
namespace {

template <typename Get>
void WorkerLine(std::ostream& os, const char* name, const ShardStats& s, Get get) {
  os << name;
  for (const ShardStats::Worker& w : s.workers) os << " " << get(w);
  os << "\n";
}

template <typename Pick>
std::vector<uint32_t> Ranks(const ShardStats& s, Pick pick) {
  std::vector<uint32_t> ranks;
  for (uint32_t w = 0; w < s.workers.size(); ++w) {
    if (pick(s.workers[w])) ranks.push_back(w);
  }
  return ranks;
}

void ChecksumText(std::ostream& os, const ShardStats& s) {
  for (const ShardStats::Checksum& c : s.checksums) {
    os << "checksum " << c.table << " " << std::hex << c.value << std::dec << "\n";
  }
}

void BackupReplicaText(std::ostream& os, const ShardStats& s) {
  const ShardStats::BackupReplica& b = *s.backup;
  os << "backup " << b.replica << " of shard " << s.shard << " endpoint " << s.endpoint << "\n";
  os << "replica applied " << b.applied << " refused " << b.refused << " min_clock "
     << s.min_clock << " started_clock " << b.started_clock << "\n";
  WorkerLine(os, "worker_clocks", s, [](const ShardStats::Worker& w) { return w.clock; });
  ChecksumText(os, s);
}

// shard, requests, consistency and the per-worker lines.
void ProgressText(std::ostream& os, const ShardStats& s) {
  os << "shard " << s.shard << " endpoint " << s.endpoint << " uptime_s " << s.uptime_s << "\n";
  os << "pushes " << s.pushes << " pulls " << s.pulls << " errors " << s.errors << " bytes_in "
     << s.bytes_in << " bytes_out " << s.bytes_out << " copy_on_write " << s.copy_on_write << "\n";
  os << "consistency " << s.consistency << " min_clock " << s.min_clock << " slowest_worker "
     << s.slowest_worker << " waiting_pulls " << s.waiting_pulls << " pulls_waited "
     << s.pulls_waited << " max_blocked_lead " << s.max_blocked_lead << "\n";
  WorkerLine(os, "worker_clocks", s, [](const ShardStats::Worker& w) { return w.clock; });
  WorkerLine(os, "worker_targets", s, [](const ShardStats::Worker& w) { return w.target; });
  WorkerLine(os, "worker_silent_ms", s, [](const ShardStats::Worker& w) { return w.silent_ms; });
  if (s.backup_workers) {
    os << "backup_workers " << s.backup_workers->backup_workers << " quorum "
       << s.backup_workers->quorum << " late_pushes " << s.backup_workers->late_pushes << "\n";
    WorkerLine(os, "worker_late_pushes", s,
               [](const ShardStats::Worker& w) { return w.late_pushes; });
  }
  os << "pushes_per_s " << s.pushes_per_s << " pulls_per_s " << s.pulls_per_s << "\n";
}

// Recovery, refusals, sums, limits and checkpoints.
void CountersText(std::ostream& os, const ShardStats& s) {
  os << "recovery started_clock " << s.started_clock << " lost_clocks " << s.lost_clocks
     << " repeated_pushes " << s.repeated_pushes << " resumes " << s.resumes << "\n";
  os << "refused refused_clocks " << s.refused_clocks << " refused_results " << s.refused_results
     << " max_resume_clocks " << s.max_resume_clocks << " refusals_not_logged "
     << s.refusals_not_logged << " refused_sum_clocks " << s.refused_sum_clocks << "\n";
  os << "sums clocks " << s.sum_clocks << " bytes " << s.sum_bytes << " parked_pushes "
     << s.parked_pushes << " parked_push_bytes " << s.parked_push_bytes << "\n";
  os << "limits queued_reply_bytes " << s.queued_reply_bytes << " max_connection_bytes "
     << s.max_connection_bytes << " connections_queued " << s.connections_queued
     << " max_queued_reply_bytes " << s.max_queued_reply_bytes << " pulls_refused_queued_bytes "
     << s.pulls_refused_queued_bytes << " pulls_refused_waiting " << s.pulls_refused_waiting
     << " replies_dropped " << s.replies_dropped << " connections_open " << s.connections_open
     << " connections_refused " << s.connections_refused << " max_connections "
     << s.max_connections << "\n";
  if (s.checkpoint.enabled) {
    // Read as it is by ps_ctl checkpoint and recovery_bench ("last_clock N writing 0").
    os << "checkpoint dir " << s.checkpoint.dir << " last_clock " << s.checkpoint.last_clock
       << " writing " << (s.checkpoint.writing ? 1 : 0) << "\n";
    os << "checkpoints started " << s.checkpoint.started << " requests_waiting "
       << s.checkpoint.requests_waiting << "\n";
  }
}

// Cache hit rates, dead and departed workers, the evaluator, a failure.
void WorkersText(std::ostream& os, const ShardStats& s) {
  os << "cache_hit_rate";
  for (uint32_t w = 0; w < s.workers.size(); ++w) {
    const uint64_t hits = s.workers[w].cache_hits, misses = s.workers[w].cache_misses;
    os << " " << w << ":";
    if (hits + misses == 0) {
      os << "-";
    } else {
      os << static_cast<double>(hits) / static_cast<double>(hits + misses);
    }
  }
  os << "\n";
  for (const auto& [name, ranks] :
       {std::pair{"dead_workers", s.DeadWorkers()}, {"left_workers", s.LeftWorkers()}}) {
    os << name;
    for (uint32_t w : ranks) os << " " << w;
    os << "\n";
  }
  if (s.evaluator) {
    os << "evaluator " << s.evaluator->state << " silent_ms " << s.evaluator->silent_ms << "\n";
  }
  if (!s.failed.empty()) os << "failed " << s.failed << "\n";
}

// Replication, memory, security and the tables.
void StateText(std::ostream& os, const ShardStats& s) {
  if (s.replication) {
    // The backups show the same checksum lines: equal checksums, equal copies.
    os << ReplicationText(*s.replication) << "\n";
    ChecksumText(os, s);
  }
  if (s.primary) {
    // Whether it accepts writes now (a split-brain test reads every
    // replica's line side by side).
    os << "primary epoch " << s.primary->epoch << " accepting " << (s.primary->accepting ? 1 : 0)
       << " fenced_refusals " << s.primary->fenced_refusals << "\n";
  }
  os << "memory rss_bytes " << s.rss_bytes << " values_bytes " << s.values_bytes << "\n";
  os << "security " << s.security << " refused_handshakes " << s.refused_handshakes
     << " failed_handshakes " << s.failed_handshakes << " refused_requests "
     << s.refused_requests << "\n";
  for (const ShardStats::Table& t : s.tables) {
    if (t.keys == "hashed") {
      os << "table " << t.name << " keys hashed dim " << t.dim << " slots [" << t.owned_begin
         << ", " << t.owned_end << ") stored_rows " << t.stored_rows << " max_rows "
         << t.max_rows << " stored_bytes " << t.stored_bytes << " dropped_rows "
         << t.dropped_rows << " unadmitted_rows " << t.unadmitted_rows << " sketch_bytes "
         << t.sketch_bytes << " evicted_rows " << t.evicted_rows << " expired_rows "
         << t.expired_rows << " non_finite_rows " << t.non_finite_rows << " refused_rows "
         << t.refused_rows << "\n";
      continue;
    }
    os << "table " << t.name << " rows " << t.rows << " dim " << t.dim << " owned ["
       << t.owned_begin << ", " << t.owned_end << ") non_finite_rows " << t.non_finite_rows
       << " refused_rows " << t.refused_rows << "\n";
  }
}

}  // namespace

std::vector<uint32_t> ShardStats::DeadWorkers() const {
  return Ranks(*this, [](const Worker& w) { return w.dead; });
}

std::vector<uint32_t> ShardStats::LeftWorkers() const {
  return Ranks(*this, [](const Worker& w) { return w.left; });
}

std::string ReplicationText(const ShardStats::Replication& r) {
  std::ostringstream os;
  os << "replication factor " << r.factor << " epoch " << r.epoch << " last_seq " << r.last_seq
     << " committed " << r.committed;
  for (const ShardStats::Replication::Backup& b : r.backups) {
    os << " backup_" << b.replica << "_" << b.state << " " << b.acked;
  }
  return os.str();
}

std::string ShardStatsText(const ShardStats& stats) {
  std::ostringstream os;
  if (stats.backup) {
    BackupReplicaText(os, stats);
    return os.str();
  }
  ProgressText(os, stats);
  CountersText(os, stats);
  WorkersText(os, stats);
  StateText(os, stats);
  return os.str();
}

std::string StatsReplyText(const ShardStats& stats, uint32_t request_flags) {
  return (request_flags & kFlagStatsJson) != 0 ? ShardStatsJson(stats) : ShardStatsText(stats);
}

}  // namespace ps
