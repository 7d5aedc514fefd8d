// How a backup (server/replication.h, BackupServer) applies what its
// primary sends: the log's entries (pushes, sums, clocks, late pushes,
// membership of the minimum) as the primary applied them, and the copy a
// joining backup takes (rows, sums, clocks, recent pushes).
#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "common/hash_slots.h"
#include "common/logging.h"
#include "server/checkpoint_format.h"
#include "server/replication.h"
#include "server/restore.h"

namespace ps {

namespace {

// The checks of an entry's fields, each InvalidArgument naming the value.
Status CheckEntryWorker(const MessageHeader& entry, uint32_t workers) {
  if (entry.worker < workers) return Status::Ok();
  return InvalidArgumentError("entry names worker " + std::to_string(entry.worker) +
                              "; the job has " + std::to_string(workers));
}

Status CheckEntryClock(const MessageHeader& entry) {
  if (entry.clock >= 0 && entry.clock < kMaxClock) return Status::Ok();
  return InvalidArgumentError("entry carries clock " + std::to_string(entry.clock));
}

// A sums entry's divisor: the workers the clock's mean is over.
Status CheckEntryMean(const MessageHeader& entry, uint32_t workers) {
  if (entry.count >= 1 && entry.count <= workers) return Status::Ok();
  return InvalidArgumentError("sums applied over " + std::to_string(entry.count) + " workers");
}

}  // namespace

Status BackupServer::Apply(const MessageHeader& entry, std::span<Frame> rest,
                           const std::function<void()>& ack) {
  const uint32_t workers = job_.cluster.workers;
  switch (static_cast<ReplicaEntry>(entry.flags)) {
    case ReplicaEntry::kPush:
    case ReplicaEntry::kAccumulate:
    case ReplicaEntry::kRefusedPush:
      PS_RETURN_IF_ERROR(CheckEntryClock(entry));
      return ApplyPushEntry(entry, rest, ack);
    case ReplicaEntry::kApplySums:
      PS_RETURN_IF_ERROR(CheckEntryClock(entry));
      PS_RETURN_IF_ERROR(CheckEntryMean(entry, workers));
      store_->ApplyAccumulated(entry.clock, 1.0f / static_cast<float>(entry.count));
      return Status::Ok();
    case ReplicaEntry::kAggregate:
      PS_RETURN_IF_ERROR(CheckEntryClock(entry));
      PS_RETURN_IF_ERROR(CheckEntryMean(entry, workers));
      return ApplyAggregate(entry, rest, ack);
    case ReplicaEntry::kFinish:
      PS_RETURN_IF_ERROR(CheckEntryWorker(entry, workers));
      PS_RETURN_IF_ERROR(CheckEntryClock(entry));
      clocks_.Finish(entry.worker, entry.clock);
      return Status::Ok();
    case ReplicaEntry::kLate:
      PS_RETURN_IF_ERROR(CheckEntryWorker(entry, workers));
      PS_RETURN_IF_ERROR(CheckEntryClock(entry));
      ack();
      recent_pushes_.Insert(entry.worker, entry.session, entry.count);
      clocks_.Admit(entry.worker, entry.clock);
      return Status::Ok();
    case ReplicaEntry::kExclude:
      PS_RETURN_IF_ERROR(CheckEntryWorker(entry, workers));
      clocks_.Exclude(entry.worker);
      return Status::Ok();
    case ReplicaEntry::kInclude:
      PS_RETURN_IF_ERROR(CheckEntryWorker(entry, workers));
      clocks_.Include(entry.worker);
      return Status::Ok();
    case ReplicaEntry::kEnd:
      ended_ = true;
      if (entry.map_epoch > 0) {
        handed_over_to_ = entry.map_epoch;
        handed_over_clock_ = entry.clock;
        PS_LOG_INFO("{}: its primary handed the shard's rows over to shard map {} at clock {}",
                    name_, entry.map_epoch, entry.clock);
      }
      return Status::Ok();
    case ReplicaEntry::kCopyRows:
    case ReplicaEntry::kCopySum:
    case ReplicaEntry::kCopyClocks:
    case ReplicaEntry::kCopyRecent:
    case ReplicaEntry::kCopyEnd:
    case ReplicaEntry::kCopyIds:
    case ReplicaEntry::kCopySketch:
    case ReplicaEntry::kCopyBegin:
    case ReplicaEntry::kInSync:
      break;  // Handle's, never here
  }
  return InvalidArgumentError("unknown replication entry kind " + std::to_string(entry.flags));
}

Status BackupServer::ApplyPushEntry(const MessageHeader& entry, std::span<Frame> rest,
                                    const std::function<void()>& ack) {
  PS_RETURN_IF_ERROR(DecodeRequest(rest, rules_, &request_));
  const MessageHeader& req = request_.header;
  if (req.op != Op::kPush || req.worker >= job_.cluster.workers) {
    return InvalidArgumentError("a push entry holds a " + OpName(req.op));
  }
  const auto kind = static_cast<ReplicaEntry>(entry.flags);
  if (kind == ReplicaEntry::kRefusedPush && !store_->layouts()[req.table].hashed) {
    return InvalidArgumentError("a refused push entry names table " + std::to_string(req.table) +
                                ", which is not a hashed table (only a hashed table keeps "
                                "marks of a refused push)");
  }
  ack();
  if (kind == ReplicaEntry::kRefusedPush) {
    // The same state and the same arithmetic as the primary's: refused
    // here too, leaving the same marks, and not recorded as applied.
    if (store_->ApplyPush(request_, entry.clock).ok()) {
      return InternalError("PUSH request " + std::to_string(req.request_id) + " from worker " +
                           std::to_string(req.worker) +
                           ", which the primary refused for a result that is not finite, was "
                           "applied here: this backup's state differs from its primary's; "
                           "restart it so that it takes a copy");
    }
    return Status::Ok();
  }
  recent_pushes_.Insert(req.worker, req.session, req.request_id);
  if (kind == ReplicaEntry::kAccumulate) {
    // As the primary admitted it (consistency.backup_workers).
    clocks_.Admit(req.worker, entry.clock);
    store_->Accumulate(request_, entry.clock);
    return Status::Ok();
  }
  // The primary's result was finite, and this is the same arithmetic.
  return store_->ApplyPush(request_, entry.clock);
}

Status BackupServer::ApplyAggregate(const MessageHeader& entry, std::span<Frame> rest,
                                    const std::function<void()>& ack) {
  const uint32_t workers = job_.cluster.workers;
  constexpr size_t kIdBytes = 3 * sizeof(uint64_t);
  constexpr size_t kIndexBytes = ShardStore::kSumIndexFields * sizeof(int64_t);
  if (rest.size() < 2 || rest[0].size() % kIdBytes != 0 || rest[1].size() % kIndexBytes != 0 ||
      rest.size() != 2 + 2 * (rest[1].size() / kIndexBytes)) {
    return InvalidArgumentError("an aggregate entry of " + std::to_string(rest.size()) +
                                " frames in a malformed shape (ids, index of clock, table and "
                                "count per sum, then two frames per sum)");
  }
  std::vector<uint64_t> ids(rest[0].size() / sizeof(uint64_t));
  std::memcpy(ids.data(), rest[0].data(), rest[0].size());
  for (size_t k = 0; k < ids.size(); k += 3) {
    if (ids[k] >= workers) {
      return InvalidArgumentError("an aggregate entry names a push of worker " +
                                  std::to_string(ids[k]) + "; the job has " +
                                  std::to_string(workers));
    }
  }
  std::vector<int64_t> index(rest[1].size() / sizeof(int64_t));
  std::memcpy(index.data(), rest[1].data(), rest[1].size());
  std::vector<ShardStore::PendingSum> sums;
  for (size_t k = 0; k < index.size() / ShardStore::kSumIndexFields; ++k) {
    const int64_t* at = index.data() + k * ShardStore::kSumIndexFields;
    if (at[0] >= entry.clock) {
      return InvalidArgumentError("an aggregate entry below clock " + std::to_string(entry.clock) +
                                  " holds a sum of clock " + std::to_string(at[0]) +
                                  " and table index " + std::to_string(at[1]));
    }
    PS_ASSIGN_OR_RETURN(ShardStore::PendingSum sum,
                        store_->SumFromFrames(at[0], at[1], at[2], rest[2 + 2 * k],
                                              rest[3 + 2 * k]));
    sums.push_back(std::move(sum));
  }
  // Checked whole: acknowledged, then taken as the primary applied it.
  ack();
  for (size_t k = 0; k < ids.size(); k += 3) {
    recent_pushes_.Insert(static_cast<uint32_t>(ids[k]), ids[k + 1], ids[k + 2]);
  }
  for (ShardStore::PendingSum& sum : sums) store_->RestoreSum(std::move(sum)).IgnoreError();
  store_->ApplyAccumulated(entry.clock, 1.0f / static_cast<float>(entry.count));
  return Status::Ok();
}

Status BackupServer::ApplyCopyRows(const MessageHeader& entry, std::span<Frame> rest) {
  const auto layouts = store_->layouts();
  auto floats = [](const Frame& f) { return f.size() / sizeof(float); };
  if (entry.table >= layouts.size()) {
    return InvalidArgumentError("a copy of table index " + std::to_string(entry.table));
  }
  const TableLayout& t = layouts[entry.table];
  const uint32_t slots = job_.tables[entry.table].optimizer.Slots();
  uint64_t& next = copy_next_row_[entry.table];
  if (entry.first_row != next || entry.count == 0 || entry.count > t.owned.end - next) {
    return DataLossError("the copy of table '" + t.name + "' sent rows " +
                         RowsText(entry.first_row, entry.first_row + entry.count) +
                         " where rows from " + std::to_string(next) + " were expected");
  }
  if (rest.size() != 1 + slots) {
    return InvalidArgumentError("a copy of table '" + t.name + "' rows with " +
                                std::to_string(rest.size()) + " frames, not " +
                                std::to_string(1 + slots));
  }
  const uint64_t n = entry.count * t.dim;
  std::vector<const std::byte*> slot_data;
  for (size_t k = 0; k < rest.size(); ++k) {
    if (floats(rest[k]) != n || rest[k].size() % sizeof(float) != 0) {
      return InvalidArgumentError("a copy of table '" + t.name + "' rows " +
                                  RowsText(entry.first_row, entry.first_row + entry.count) +
                                  " with a frame of " + std::to_string(rest[k].size()) +
                                  " bytes, not " + std::to_string(n * sizeof(float)));
    }
    if (k > 0) slot_data.push_back(reinterpret_cast<const std::byte*>(rest[k].data()));
  }
  store_->RestoreRows(entry.table, entry.first_row, entry.count,
                      reinterpret_cast<const std::byte*>(rest[0].data()), slot_data);
  next += entry.count;
  ++copy_blocks_;
  return Status::Ok();
}

Status BackupServer::ApplyCopyIds(const MessageHeader& entry, std::span<Frame> rest) {
  const auto layouts = store_->layouts();
  if (entry.table >= layouts.size() || !layouts[entry.table].hashed) {
    return InvalidArgumentError("a copy of rows by id of table index " +
                                std::to_string(entry.table) + ", which is not a hashed table");
  }
  const TableLayout& t = layouts[entry.table];
  const uint64_t stride = uint64_t{t.dim} * (1 + job_.tables[entry.table].optimizer.Slots());
  uint64_t& next = copy_next_row_[entry.table];
  if (entry.first_row != next || entry.count == 0) {
    return DataLossError("the copy of table '" + t.name + "' sent its rows " +
                         RowsText(entry.first_row, entry.first_row + entry.count) +
                         " where rows from " + std::to_string(next) + " were expected");
  }
  // Ids, rows and, when the table evicts, their uses.
  const bool uses = job_.tables[entry.table].evict.enabled();
  if (rest.size() != (uses ? 3u : 2u) || rest[0].size() != entry.count * sizeof(uint64_t) ||
      rest[1].size() != entry.count * stride * sizeof(float) ||
      (uses && rest[2].size() != entry.count * kRowUseBytes)) {
    return InvalidArgumentError("a copy of " + std::to_string(entry.count) +
                                " rows of table '" + t.name + "' in a malformed shape (" +
                                std::to_string(rest.size()) + " frames)");
  }
  std::vector<uint64_t> scratch;
  const std::span<const uint64_t> ids = FrameAs<uint64_t>(rest[0], &scratch);
  for (uint64_t id : ids) {
    const uint32_t slot = IdSlot(id, t.hash_seed, t.slots);
    if (!t.owned.Contains(slot)) {
      return DataLossError("the copy of table '" + t.name + "' sent id " + std::to_string(id) +
                           " of hash slot " + std::to_string(slot) + ", outside this shard's " +
                           RowsText(t.owned.begin, t.owned.end));
    }
  }
  PS_RETURN_IF_ERROR(store_->RestoreIds(
      entry.table, ids, reinterpret_cast<const std::byte*>(rest[1].data()),
      uses ? reinterpret_cast<const std::byte*>(rest[2].data()) : nullptr));
  next += entry.count;
  ++copy_blocks_;
  return Status::Ok();
}

void BackupServer::StartCopy(int64_t epoch) {
  copy_epoch_ = epoch;
  ResetCopyProgress();
}

void BackupServer::ResetCopyProgress() {
  const auto layouts = store_->layouts();
  for (uint32_t t = 0; t < copy_next_row_.size(); ++t) {
    // A hashed table's copy counts its rows from 0.
    copy_next_row_[t] = layouts[t].hashed ? 0 : layouts[t].owned.begin;
  }
  copy_blocks_ = copy_sums_ = copy_hashed_sums_ = 0;
  copy_clocks_ = copy_recent_ = false;
}

Status BackupServer::ApplyCopy(const MessageHeader& entry, std::span<Frame> rest) {
  const auto kind = static_cast<ReplicaEntry>(entry.flags);
  const auto layouts = store_->layouts();
  switch (kind) {
    case ReplicaEntry::kCopyBegin:
      // TakeCopyEntry starts a copy while none brought rows.
      return DataLossError("a copy of epoch " + std::to_string(entry.epoch) + " began after " +
                           std::to_string(copy_blocks_) + " entries of the copy of epoch " +
                           std::to_string(copy_epoch_.value_or(0)) +
                           ", which this replica holds part of");
    case ReplicaEntry::kCopyRows:
      return ApplyCopyRows(entry, rest);
    case ReplicaEntry::kCopyIds:
      return ApplyCopyIds(entry, rest);
    case ReplicaEntry::kCopySketch:
      if (entry.table >= layouts.size() || rest.size() != 1 ||
          !store_->RestoreSketch(entry.table,
                                 {reinterpret_cast<const std::byte*>(rest[0].data()),
                                  rest[0].size()})) {
        return InvalidArgumentError("a copy of an admission sketch of table index " +
                                    std::to_string(entry.table) + " that does not fit its "
                                    "sketch (" + std::to_string(rest.size()) + " frames)");
      }
      ++copy_blocks_;
      return Status::Ok();
    case ReplicaEntry::kCopySum: {
      if (rest.size() != 2) {
        return InvalidArgumentError("a copy of a sum of " + std::to_string(rest.size()) +
                                    " frames in a malformed shape (two frames)");
      }
      PS_ASSIGN_OR_RETURN(ShardStore::PendingSum sum,
                          store_->SumFromFrames(entry.clock, entry.table,
                                                static_cast<int64_t>(entry.count), rest[0],
                                                rest[1]));
      if (layouts[sum.table].hashed) ++copy_hashed_sums_;
      ++copy_sums_;
      ++copy_blocks_;
      return store_->RestoreSum(std::move(sum));
    }
    case ReplicaEntry::kCopyClocks: {
      if (rest.size() != 1 || rest[0].size() % sizeof(int64_t) != 0) {
        return InvalidArgumentError("a copy of the clocks in a malformed shape");
      }
      std::vector<int64_t> data(rest[0].size() / sizeof(int64_t));
      std::memcpy(data.data(), rest[0].data(), rest[0].size());
      if (!clocks_.Decode(data, kMaxClock)) {
        return InvalidArgumentError("a copy of the clocks that is not a table of " +
                                    std::to_string(clocks_.num_workers()) + " workers");
      }
      copy_clocks_ = true;
      return Status::Ok();
    }
    case ReplicaEntry::kCopyRecent: {
      if (rest.size() != 1 || rest[0].size() % sizeof(uint64_t) != 0) {
        return InvalidArgumentError("a copy of the recent pushes in a malformed shape");
      }
      std::vector<uint64_t> data(rest[0].size() / sizeof(uint64_t));
      std::memcpy(data.data(), rest[0].data(), rest[0].size());
      if (!recent_pushes_.Decode(data)) {
        return InvalidArgumentError("a copy of the recent pushes that does not fit " +
                                    std::to_string(clocks_.num_workers()) + " workers");
      }
      copy_recent_ = true;
      return Status::Ok();
    }
    case ReplicaEntry::kCopyEnd: {
      for (uint32_t t = 0; t < layouts.size(); ++t) {
        // A hashed table's chunks are counted in the entries (below).
        if (!layouts[t].hashed && copy_next_row_[t] != layouts[t].owned.end) {
          return DataLossError("the copy ended with table '" + layouts[t].name + "' rows " +
                               RowsText(copy_next_row_[t], layouts[t].owned.end) + " missing");
        }
      }
      if (!copy_clocks_ || !copy_recent_ || entry.count != copy_blocks_) {
        return DataLossError("the copy ended after " + std::to_string(copy_blocks_) +
                             " entries of rows and sums (the primary sent " +
                             std::to_string(entry.count) + ")" +
                             (copy_clocks_ ? "" : " without the clocks") +
                             (copy_recent_ ? "" : " without the recent pushes"));
      }
      copying_ = false;
      applied_ = entry.request_id;
      PS_LOG_INFO("{} took its primary's copy ({} blocks and {} pending sums, {} of them of "
                  "hashed tables; clock {}) as of entry {}; it takes the entries after it",
                  name_, copy_blocks_ - copy_sums_, copy_sums_, copy_hashed_sums_,
                  clocks_.min_clock(), applied_);
      return Status::Ok();
    }
    default:
      break;
  }
  return InvalidArgumentError("entry kind " + std::to_string(entry.flags) +
                              " is not part of a copy");
}

}  // namespace ps
