#include "tools/ctl_status.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <type_traits>
#include <utility>

#include "common/endpoint.h"
#include "common/text.h"
#include "tools/tcp_probe.h"

namespace ps {
namespace {

std::string Fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string Count(uint64_t n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kMB = 1e6;

std::string OptionalFixed(const std::optional<double>& value, double scale, int decimals) {
  return value ? Fixed(*value / scale, decimals) : std::string("-");
}

std::string OptionalBytes(const std::optional<uint64_t>& value, double scale, int decimals) {
  return value ? Fixed(static_cast<double>(*value) / scale, decimals) : std::string("-");
}

// Columns of text, each as wide as its widest cell; numbers to the right.
class TextTable {
 public:
  // `left`: one flag per column, true to align that column to the left.
  explicit TextTable(std::vector<bool> left) : left_(std::move(left)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const {
    std::vector<size_t> width(left_.size(), 0);
    for (const auto& row : rows_) {
      for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
        width[c] = std::max(width[c], row[c].size());
      }
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line;
      for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
        if (c > 0) line += "  ";
        const std::string pad(width[c] - row[c].size(), ' ');
        line += left_[c] ? row[c] + pad : pad + row[c];
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<bool> left_;
  std::vector<std::vector<std::string>> rows_;
};

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";  // JSON has no NaN or infinity
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.10g", value);
  return buffer;
}

template <typename T>
std::string JsonOptional(const std::optional<T>& value) {
  if (!value) return "null";
  if constexpr (std::is_floating_point_v<T>) {
    return JsonNumber(*value);
  } else {
    return std::to_string(*value);
  }
}

}  // namespace

namespace {

// Why nothing answers at any of `shard`'s addresses, or nullopt when
// something listens at one of them.
std::optional<std::string> WhyNoAnswer(const JobOptions& job, uint32_t shard,
                                       std::optional<uint32_t> replica,
                                       std::chrono::milliseconds probe_deadline) {
  std::vector<uint32_t> replicas;
  if (replica) {
    replicas.push_back(*replica);
  } else {
    for (uint32_t j = 0; j < std::max<uint32_t>(1, job.replication.factor); ++j) {
      replicas.push_back(j);
    }
  }
  bool all_refused = true;
  std::string reasons;
  for (const uint32_t j : replicas) {
    auto where = ReplicaHostPort(job, shard, j);
    std::string reason;
    if (!where.ok()) {
      all_refused = false;  // Validate() admits no such entry: say so rather than guess
      reason = std::string(where.status().message());
    } else {
      const TcpProbe probe = ProbeTcp(*where, probe_deadline);
      if (probe.result == ProbeResult::kListening) return std::nullopt;
      all_refused &= probe.result == ProbeResult::kRefused;
      reason = (replicas.size() > 1 ? where->canonical + " " : std::string()) + probe.reason;
    }
    reasons += (reasons.empty() ? "" : "; ") + reason;
  }
  return std::string(all_refused ? "not running" : "unreachable") +
         (replicas.size() > 1 ? ": no replica listens (" : " (") + reasons + ")";
}

}  // namespace

std::vector<ShardSample> SampleShards(ControlClient& client, const JobOptions& job,
                                      std::optional<uint32_t> only_shard,
                                      std::optional<uint32_t> replica,
                                      std::chrono::milliseconds deadline,
                                      std::chrono::milliseconds probe_deadline) {
  std::vector<ShardSample> samples;
  for (uint32_t shard = 0; shard < client.num_shards(); ++shard) {
    if (only_shard && *only_shard != shard) continue;
    ShardSample sample;
    sample.shard = shard;
    if (auto where = ReplicaHostPort(job, shard, replica.value_or(0)); where.ok()) {
      sample.address = where->canonical;
    } else {
      sample.address = client.endpoint(shard);
    }
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      auto report = client.StructuredStats(shard);
      if (report.ok() && report->backup) {
        // A backup holds no worker's state: its primary answers for the shard.
        sample.problem = "answered as backup " + std::to_string(report->backup->replica) +
                         " of the shard, not as its primary (`ps_ctl status --raw` prints "
                         "its report)";
        break;
      }
      if (report.ok()) {
        sample.stats = std::move(*report);
        break;
      }
      if (report.status().code() != StatusCode::kDeadlineExceeded) {
        sample.problem = report.status().ToString();
        break;
      }
      if (auto why = WhyNoAnswer(job, shard, replica, probe_deadline)) {
        sample.problem = std::move(*why);
        break;
      }
      if (std::chrono::steady_clock::now() - start >= deadline) {
        sample.problem = report.status().ToString();
        break;
      }
      // Asked again; a pause in case the client failed faster than its
      // deadline, so that no loop of connections runs against the server.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    sample.taken = std::chrono::steady_clock::now();
    samples.push_back(std::move(sample));
  }
  return samples;
}

const char* WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kStarting:
      return "starting";
    case WorkerState::kTraining:
      return "training";
    case WorkerState::kDead:
      return "dead";
    case WorkerState::kLeft:
      return "left";
  }
  return "?";
}

namespace {

// The row of a shard that answered; its byte rates from `before`'s sample
// of the same shard (and the interval into `view`).
ShardRow AnsweredRow(const ShardSample& sample, std::span<const ShardSample> before,
                     JobView& view) {
  const ShardStats& s = *sample.stats;
  ShardRow row;
  row.shard = sample.shard;
  row.address = sample.address;
  row.answered = true;
  row.endpoint = s.endpoint;
  row.uptime_s = s.uptime_s;
  row.pushes_per_s = s.pushes_per_s;
  row.pulls_per_s = s.pulls_per_s;
  row.requests_per_s = s.pushes_per_s + s.pulls_per_s;
  row.waiting_pulls = s.waiting_pulls;
  row.errors = s.errors;
  // 0: the server could not read its resident size (no /proc).
  if (s.rss_bytes > 0) row.rss_bytes = s.rss_bytes;
  row.values_bytes = s.values_bytes;
  if (s.checkpoint.enabled) row.checkpoint = s.checkpoint;
  row.failed = s.failed;
  row.stats = s;
  for (const ShardSample& old : before) {
    if (old.shard != sample.shard || !old.stats) continue;
    const double dt = std::chrono::duration<double>(sample.taken - old.taken).count();
    // Counters start again from 0 when the server restarted in between.
    if (dt <= 0 || s.uptime_s < old.stats->uptime_s || s.bytes_in < old.stats->bytes_in ||
        s.bytes_out < old.stats->bytes_out) {
      break;
    }
    row.in_bytes_per_s = static_cast<double>(s.bytes_in - old.stats->bytes_in) / dt;
    row.out_bytes_per_s = static_cast<double>(s.bytes_out - old.stats->bytes_out) / dt;
    if (!view.interval_s) view.interval_s = dt;
    break;
  }
  return row;
}

// The evaluator as the answering shards see it: the most recent hearing,
// and "left" or "dead" as any says.
void EvaluatorOf(std::span<const ShardStats* const> answered, JobView& view) {
  for (const ShardStats* s : answered) {
    if (!s->evaluator) continue;
    const double silent = static_cast<double>(s->evaluator->silent_ms) / 1000.0;
    view.evaluator_silent_s =
        view.evaluator_silent_s ? std::min(*view.evaluator_silent_s, silent) : silent;
    const bool gone = view.evaluator_state == "left" || view.evaluator_state == "dead";
    if (!gone) view.evaluator_state = s->evaluator->state;
  }
}

WorkerRow WorkerRowOf(uint32_t w, std::span<const ShardStats* const> answered) {
  WorkerRow row;
  row.worker = w;
  std::optional<int64_t> clock;
  bool dead = false, left = false;
  for (const ShardStats* s : answered) {
    if (w >= s->workers.size()) continue;
    const ShardStats::Worker& sw = s->workers[w];
    clock = clock ? std::min(*clock, sw.clock) : sw.clock;
    row.target = std::max(row.target, sw.target);
    if (s->backup_workers) {
      row.late_pushes = row.late_pushes.value_or(0) + static_cast<int64_t>(sw.late_pushes);
    }
    if (sw.silent_ms >= 0) {
      const double silent = static_cast<double>(sw.silent_ms) / 1000.0;
      row.silent_s = row.silent_s ? std::min(*row.silent_s, silent) : silent;
    }
    dead |= sw.dead;
    left |= sw.left;
  }
  row.clock = clock.value_or(0);
  // A worker that left after a failure may be listed dead too: it is gone
  // either way, and left says it said goodbye.
  row.state = left           ? WorkerState::kLeft
              : dead         ? WorkerState::kDead
              : row.silent_s ? WorkerState::kTraining
                             : WorkerState::kStarting;
  return row;
}

// Each row's distance behind the fastest worker, and the slowest worker
// that is starting or training.
void SlowestOf(JobView& view) {
  if (view.workers_rows.empty()) return;
  const WorkerRow* fastest = &view.workers_rows[0];
  for (const WorkerRow& r : view.workers_rows) {
    if (r.clock > fastest->clock) fastest = &r;
  }
  const WorkerRow* slowest = nullptr;
  for (WorkerRow& r : view.workers_rows) {
    r.behind = fastest->clock - r.clock;
    const bool active = r.state == WorkerState::kTraining || r.state == WorkerState::kStarting;
    if (active && (slowest == nullptr || r.clock < slowest->clock)) {
      slowest = &r;
    }
  }
  if (slowest != nullptr) {
    view.slowest = slowest->worker;
    view.fastest = fastest->worker;
    view.slowest_behind = slowest->behind;
  }
}

}  // namespace

JobView BuildJobView(const JobOptions& job, std::span<const ShardSample> now,
                     std::span<const ShardSample> before) {
  JobView view;
  view.config = job.source;
  view.workers = job.cluster.workers;
  view.shards = static_cast<uint32_t>(job.cluster.servers.size());
  view.consistency = ConsistencyName(job.consistency);
  if (job.consistency.aggregate) view.consistency += " aggregated";
  view.replication_factor = job.replication.factor;
  view.all_answered = true;

  std::vector<const ShardStats*> answered;
  for (const ShardSample& sample : now) {
    if (sample.stats) {
      answered.push_back(&*sample.stats);
      view.shard_rows.push_back(AnsweredRow(sample, before, view));
      continue;
    }
    view.all_answered = false;
    ShardRow row;
    row.shard = sample.shard;
    row.address = sample.address;
    row.problem = sample.problem;
    view.shard_rows.push_back(std::move(row));
  }
  if (answered.empty()) return view;
  EvaluatorOf(answered, view);
  for (uint32_t w = 0; w < view.workers; ++w) {
    view.workers_rows.push_back(WorkerRowOf(w, answered));
  }
  SlowestOf(view);
  return view;
}

namespace {

// The table of workers, the slowest, the evaluator.
std::string WorkersText(const JobView& view) {
  if (view.workers_rows.empty()) return "workers: unknown (no shard answered)\n";
  // consistency.backup_workers: each worker's pushes dropped as late.
  const bool late = std::any_of(view.workers_rows.begin(), view.workers_rows.end(),
                                [](const WorkerRow& r) { return r.late_pushes.has_value(); });
  std::vector<bool> align = {false, false, false, false, false};
  std::vector<std::string> head = {"worker", "clock", "of", "behind", "silent"};
  if (late) {
    align.push_back(false);
    head.push_back("late pushes");
  }
  align.push_back(true);
  head.push_back("state");
  TextTable workers(align);
  workers.Add(head);
  for (const WorkerRow& r : view.workers_rows) {
    std::vector<std::string> cells = {
        std::to_string(r.worker), std::to_string(r.clock),
        r.target > 0 ? std::to_string(r.target) : std::string("-"), std::to_string(r.behind),
        r.silent_s ? Fixed(*r.silent_s, 1) + " s" : std::string("-")};
    if (late) cells.push_back(std::to_string(r.late_pushes.value_or(0)));
    cells.push_back(WorkerStateName(r.state));
    workers.Add(cells);
  }
  std::string out = workers.Render();
  if (!view.slowest) {
    out += "no worker is training: every one is dead or left\n";
  } else if (view.slowest_behind == 0) {
    out += "the workers are level at clock " +
           std::to_string(view.workers_rows[*view.slowest].clock) + "\n";
  } else {
    out += "worker " + std::to_string(*view.slowest) +
           " is slowest: " + std::to_string(view.slowest_behind) + " clock" +
           (view.slowest_behind == 1 ? "" : "s") + " behind worker " +
           std::to_string(*view.fastest) + "\n";
  }
  if (!view.evaluator_state.empty()) {
    out += "evaluator: " + view.evaluator_state + ", last heard " +
           Fixed(view.evaluator_silent_s.value_or(0), 1) + " s ago\n";
  }
  // "of" is train.iterations, as each worker told the shards when it
  // joined (ps_ctl links no worker code to read the train section).
  out +=
      "(clock: steps finished, the least over shards; of: the worker's train.iterations, as "
      "it said when it joined)\n";
  return out;
}

// The table of shards, a line per shard that did not answer or failed.
std::string ShardsText(const JobView& view) {
  TextTable shards({false, true, false, false, false, false, false, false, false, true});
  shards.Add({"shard", "address", "req/s", "in MB/s", "out MB/s", "waiting", "errors", "RSS MiB",
              "values MiB", "checkpoint"});
  for (const ShardRow& r : view.shard_rows) {
    if (!r.answered) {
      shards.Add({std::to_string(r.shard), r.address, "-", "-", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    std::string checkpoint = "-";
    if (r.checkpoint) {
      checkpoint = "clock " + std::to_string(r.checkpoint->last_clock);
      if (r.checkpoint->writing) checkpoint += ", writing";
    }
    shards.Add({std::to_string(r.shard), r.address, Fixed(r.requests_per_s, 1),
                OptionalFixed(r.in_bytes_per_s, kMB, 2), OptionalFixed(r.out_bytes_per_s, kMB, 2),
                std::to_string(r.waiting_pulls), std::to_string(r.errors),
                OptionalBytes(r.rss_bytes, kMiB, 1), OptionalBytes(r.values_bytes, kMiB, 1),
                checkpoint});
  }
  std::string out = shards.Render();
  for (const ShardRow& r : view.shard_rows) {
    if (!r.answered)
      out += "shard " + std::to_string(r.shard) + " at " + r.address + ": " + r.problem + "\n";
    if (!r.failed.empty())
      out += "shard " + std::to_string(r.shard) + " failed: " + r.failed + "\n";
  }
  return out;
}

// Each hashed table's rows on each answering shard against its bound;
// empty when the job has none.
std::string HashedTablesText(const JobView& view) {
  TextTable tables({true, false, false, false, false, false, false, false, false});
  tables.Add({"hashed table", "shard", "rows", "max rows", "MiB", "dropped", "unadmitted",
              "evicted", "expired"});
  bool any = false;
  for (const ShardRow& r : view.shard_rows) {
    if (!r.stats) continue;
    for (const ShardStats::Table& t : r.stats->tables) {
      if (t.keys != "hashed") continue;
      any = true;
      tables.Add({t.name, std::to_string(r.shard), std::to_string(t.stored_rows),
                  std::to_string(t.max_rows), Fixed(static_cast<double>(t.stored_bytes) / kMiB, 1),
                  std::to_string(t.dropped_rows), std::to_string(t.unadmitted_rows),
                  std::to_string(t.evicted_rows), std::to_string(t.expired_rows)});
    }
  }
  return any ? "\n" + tables.Render() +
                   "(dropped: pushed rows of new ids refused at the shard's bound, max_rows or "
                   "max_mb; unadmitted: pushed rows of ids the admission filter has not admitted "
                   "yet; evicted: rows evicted at the bound for new ids; expired: rows evicted "
                   "for idleness)\n"
             : std::string();
}

}  // namespace

std::string FormatJobView(const JobView& view) {
  std::string out = "job " + view.config + ": " + Count(view.workers, "worker") + ", " +
                    Count(view.shards, "shard") + ", consistency " + view.consistency;
  if (view.replication_factor > 1) {
    out += ", replication factor " + std::to_string(view.replication_factor);
  }
  out += "\n\n" + WorkersText(view) + "\n" + ShardsText(view) + HashedTablesText(view);
  if (view.interval_s) {
    out += "(MB/s over the last " + Fixed(*view.interval_s, 1) +
           " s; req/s as the server measures it; waiting: pulls held for slower workers)\n";
  } else {
    out +=
        "(MB/s needs two samples: --watch; req/s as the server measures it; waiting: pulls "
        "held for slower workers)\n";
  }
  return out;
}

std::string JobViewJson(const JobView& view) {
  std::string out = "{\"job\":{\"config\":" + JsonString(view.config) +
                    ",\"workers\":" + std::to_string(view.workers) +
                    ",\"shards\":" + std::to_string(view.shards) +
                    ",\"consistency\":" + JsonString(view.consistency) +
                    ",\"replication_factor\":" + std::to_string(view.replication_factor) +
                    ",\"steps\":null}";
  out += ",\"all_answered\":";
  out += view.all_answered ? "true" : "false";
  out += ",\"interval_s\":" + JsonOptional(view.interval_s);
  out += ",\"workers\":[";
  for (const WorkerRow& r : view.workers_rows) {
    if (&r != view.workers_rows.data()) out += ",";
    out += "{\"worker\":" + std::to_string(r.worker) + ",\"clock\":" + std::to_string(r.clock) +
           ",\"target\":" + (r.target > 0 ? std::to_string(r.target) : std::string("null")) +
           ",\"behind\":" + std::to_string(r.behind) + ",\"silent_s\":" + JsonOptional(r.silent_s) +
           ",\"late_pushes\":" +
           (r.late_pushes ? std::to_string(*r.late_pushes) : std::string("null")) +
           ",\"state\":" + JsonString(WorkerStateName(r.state)) + "}";
  }
  out += "],\"evaluator\":";
  out += view.evaluator_state.empty()
             ? std::string("null")
             : "{\"state\":" + JsonString(view.evaluator_state) +
                   ",\"silent_s\":" + JsonOptional(view.evaluator_silent_s) + "}";
  out += ",\"slowest\":";
  if (view.slowest) {
    out += "{\"worker\":" + std::to_string(*view.slowest) +
           ",\"behind\":" + std::to_string(view.slowest_behind) +
           ",\"fastest\":" + std::to_string(*view.fastest) + "}";
  } else {
    out += "null";
  }
  out += ",\"shards\":[";
  for (const ShardRow& r : view.shard_rows) {
    if (&r != view.shard_rows.data()) out += ",";
    out += "{\"shard\":" + std::to_string(r.shard) + ",\"address\":" + JsonString(r.address) +
           ",\"answered\":" + (r.answered ? "true" : "false");
    if (!r.answered) {
      out += ",\"problem\":" + JsonString(r.problem) + "}";
      continue;
    }
    out += ",\"endpoint\":" + JsonString(r.endpoint) + ",\"uptime_s\":" + JsonNumber(r.uptime_s) +
           ",\"requests_per_s\":" + JsonNumber(r.requests_per_s) +
           ",\"pushes_per_s\":" + JsonNumber(r.pushes_per_s) +
           ",\"pulls_per_s\":" + JsonNumber(r.pulls_per_s) +
           ",\"in_bytes_per_s\":" + JsonOptional(r.in_bytes_per_s) +
           ",\"out_bytes_per_s\":" + JsonOptional(r.out_bytes_per_s) +
           ",\"waiting_pulls\":" + std::to_string(r.waiting_pulls) +
           ",\"errors\":" + std::to_string(r.errors) +
           ",\"rss_bytes\":" + JsonOptional(r.rss_bytes) +
           ",\"values_bytes\":" + JsonOptional(r.values_bytes) + ",\"checkpoint\":";
    if (r.checkpoint) {
      out += "{\"last_clock\":" + std::to_string(r.checkpoint->last_clock) +
             ",\"writing\":" + (r.checkpoint->writing ? "true" : "false") + "}";
    } else {
      out += "null";
    }
    out += ",\"failed\":" + (r.failed.empty() ? std::string("null") : JsonString(r.failed));
    out += ",\"stats\":" + (r.stats ? ShardStatsJson(*r.stats) : std::string("null")) + "}";
  }
  out += "]}";
  return out;
}

}  // namespace ps
