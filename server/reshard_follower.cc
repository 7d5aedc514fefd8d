#include "server/reshard_follower.h"

#include <algorithm>
#include <cstring>
#include <chrono>
#include <thread>
#include <utility>

#include "common/endpoint.h"
#include "common/hash_slots.h"
#include "common/reshard_sources.h"
#include "common/logging.h"
#include "common/transport.h"
#include "common/wire.h"
#include "server/control_request.h"

namespace ps {

ReshardFollower::~ReshardFollower() {
  if (retired_.joinable()) retired_.join();
}

StatusOr<std::unique_ptr<ReshardFollower>> ReshardFollower::Create(const JobOptions& from,
                                                                   const JobOptions& to,
                                                                   uint32_t shard,
                                                                   uint32_t replica,
                                                                   int64_t map_epoch, Env* env) {
  if (shard >= to.cluster.servers.size() || replica >= to.replication.factor) {
    return InvalidArgumentError("replica " + std::to_string(replica) + " of shard " +
                                std::to_string(shard) + " is not one of the next map's (" +
                                std::to_string(to.cluster.servers.size()) +
                                " shards, replication.factor " +
                                std::to_string(to.replication.factor) + ")");
  }
  std::unique_ptr<ReshardFollower> f(new ReshardFollower(from, to, shard, replica, map_epoch));
  const std::string who = f->Name();
  if (Status can = CanFollow(from, to); !can.ok()) return can.WithContext(who);
  f->env_ = env;
  f->sources_ = FollowedShards(from, to, shard);
  PS_ASSIGN_OR_RETURN(const HostPort own, ReplicaAddress(to, shard, replica));
  PS_ASSIGN_OR_RETURN(const std::string host, ResolveHost(own));
  for (uint32_t i : f->sources_) {
    PS_ASSIGN_OR_RETURN(
        std::unique_ptr<BackupServer> copy,
        BackupServer::CreateFollower(from, i, "tcp://" + host + ":*",
                                     who + "'s copy of shard " + std::to_string(i), env));
    f->copies_.push_back(std::move(copy));
  }
  return f;
}

std::string ReshardFollower::Name() const {
  return (replica_ > 0 ? "replica " + std::to_string(replica_) + " of " : std::string()) +
         "shard " + std::to_string(shard_) + " of map " + std::to_string(map_epoch_);
}

Status ReshardFollower::AskToFollow() {
  // One RESHARD request per old shard, as a control client sends it (the
  // follow needs no rendezvous), each answered within the job's
  // client.request_timeout_ms. Its primary sends the rows: the shard's
  // replicas are asked in turn from replica 0 until one is not a backup (a
  // backup promoted earlier serves at its own address).
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Context> context, Context::Create(1));
  for (size_t k = 0; k < sources_.size(); ++k) {
    const std::string who = "shard " + std::to_string(sources_[k]) + " was asked to send its " +
                            "rows to " + Name();
    MessageHeader request;
    request.op = Op::kReshard;
    request.worker = kControlWorker;
    request.shard = sources_[k];
    request.flags = kReshardFollow;
    request.map_epoch = map_epoch_;
    request.text = copies_[k]->endpoint();
    Status asked;
    for (uint32_t r = 0; r < from_.replication.factor; ++r) {
      PS_ASSIGN_OR_RETURN(const HostPort where, ReplicaAddress(from_, sources_[k], r));
      SocketOptions options;
      options.linger_ms = 0;
      PS_ASSIGN_OR_RETURN(std::unique_ptr<Socket> socket,
                          Socket::Create(context.get(), SocketType::kDealer, options));
      PS_RETURN_IF_ERROR(socket->Connect(ConnectEndpoint(where)).WithContext(who));
      request.request_id = k * from_.replication.factor + r + 1;
      MessageHeader answer;
      asked = AskServer(
          *socket, request, std::chrono::milliseconds(from_.client.request_timeout_ms),
          std::chrono::milliseconds(20),
          [this] { return stop_.load(std::memory_order_relaxed); }, &answer);
      if (asked.ok() || (answer.flags & kFlagNotPrimary) == 0) break;
    }
    PS_RETURN_IF_ERROR(asked.WithContext(who));
  }
  return Status::Ok();
}

Status ReshardFollower::Follow() {
  std::vector<Status> ran(copies_.size());
  std::vector<std::atomic<bool>> done(copies_.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < copies_.size(); ++k) {
    threads.emplace_back([this, k, &ran, &done] {
      ran[k] = copies_[k]->Run();
      done[k].store(true, std::memory_order_release);
    });
  }
  // A copy that ended without the handover ends the others: this server
  // does not take over.
  for (;;) {
    bool all = true, failed = stop_.load(std::memory_order_relaxed);
    for (size_t k = 0; k < copies_.size(); ++k) {
      if (!done[k].load(std::memory_order_acquire)) {
        all = false;
      } else if (!copies_[k]->handed_over() || copies_[k]->copying()) {
        failed = true;
      }
    }
    if (all) break;
    if (failed) {
      for (auto& copy : copies_) copy->Stop();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::thread& t : threads) t.join();
  if (stop_.load(std::memory_order_relaxed)) {
    return CancelledError(Name() + " was stopped while it followed");
  }
  for (size_t k = 0; k < copies_.size(); ++k) {
    PS_RETURN_IF_ERROR(ran[k]);
    const BackupServer& copy = *copies_[k];
    const std::string source = "shard " + std::to_string(sources_[k]);
    if (copy.copying()) {
      return FailedPreconditionError(source + " stopped before its copy was whole");
    }
    if (!copy.handed_over()) {
      return FailedPreconditionError(source + " stopped without handing its rows over" +
                                     (copy.refused() > 0 ? " (" + std::to_string(copy.refused()) +
                                                               " of its entries were refused)"
                                                         : ""));
    }
    if (copy.handed_over_to() != map_epoch_ ||
        copy.handed_over_clock() != copies_[0]->handed_over_clock()) {
      return FailedPreconditionError(
          source + " handed over to map " + std::to_string(copy.handed_over_to()) +
          " at clock " + std::to_string(copy.handed_over_clock()) + ", not to map " +
          std::to_string(map_epoch_) + " at clock " +
          std::to_string(copies_[0]->handed_over_clock()));
    }
    if (copy.refused() > 0) {
      return FailedPreconditionError(source + ": " + std::to_string(copy.refused()) +
                                     " entries were refused; the copy may miss changes");
    }
  }
  return Status::Ok();
}

namespace {

// A range table's rows shard `shard` owns, values and optimizer state,
// from the old shards' stores (their blocks shared, not copied).
Status AssembleRange(uint32_t shard, uint32_t t, std::span<ShardStore* const> old,
                     ShardStore* store) {
  const TableLayout& layout = store->layouts()[t];
  const RowRange own = layout.owned;
  const uint64_t dim = layout.dim;
  uint64_t restored = 0;
  for (ShardStore* copy : old) {
    ShardStore& from = *copy;
    for (uint64_t b = 0; b < from.block_count(t); ++b) {
      std::vector<Frame> frames;
      uint64_t first = 0, rows = 0;
      PS_RETURN_IF_ERROR(from.ShareBlock(t, b, &frames, &first, &rows));
      const uint64_t lo = std::max(first, own.begin), hi = std::min(first + rows, own.end);
      if (lo >= hi) continue;
      const size_t offset = (lo - first) * dim * sizeof(float);
      std::vector<const std::byte*> slots;
      for (size_t k = 1; k < frames.size(); ++k) {
        slots.push_back(static_cast<const std::byte*>(frames[k].data()) + offset);
      }
      store->RestoreRows(t, lo, hi - lo, static_cast<const std::byte*>(frames[0].data()) + offset,
                         slots);
      restored += hi - lo;
    }
  }
  if (restored != own.end - own.begin) {
    return FailedPreconditionError("table '" + layout.name + "': the old shards hold " +
                                   std::to_string(restored) + " of the " +
                                   std::to_string(own.end - own.begin) + " rows of shard " +
                                   std::to_string(shard));
  }
  return Status::Ok();
}

// A hashed table's rows of the ids whose hash slot the shard owns, with
// their uses, and the admission sketches of the old shards whose slots
// overlap its own merged counter by counter by their maximum: as a
// restore onto another shard count does (server/restore.h).
Status AssembleHashed(const TableOptions& table, uint32_t t, std::span<ShardStore* const> old,
                      ShardStore* store) {
  const RowRange own = store->layouts()[t].owned;  // hash slots
  const uint64_t seed = table.HashSeed();
  const uint32_t slots = table.HashSlots();
  std::vector<uint16_t> sketch(store->SketchData(t).size() / sizeof(uint16_t), 0);
  for (const ShardStore* copy : old) {
    const ShardStore& from = *copy;
    const RowRange theirs = from.layouts()[t].owned;
    if (std::max(theirs.begin, own.begin) >= std::min(theirs.end, own.end)) continue;
    const std::span<const std::byte> counters = from.SketchData(t);
    if (counters.size() != sketch.size() * sizeof(uint16_t)) {
      return FailedPreconditionError("table '" + table.name + "': an old shard's admission "
                                     "sketch has " + std::to_string(counters.size()) +
                                     " bytes, this shard's " +
                                     std::to_string(sketch.size() * sizeof(uint16_t)));
    }
    for (size_t i = 0; i < sketch.size(); ++i) {
      uint16_t c;
      std::memcpy(&c, counters.data() + i * sizeof(uint16_t), sizeof c);
      sketch[i] = std::max(sketch[i], c);
    }
    const uint64_t stored = from.stored_rows(t);
    const uint64_t chunk = from.HashedRowsPerCopy(t);
    for (uint64_t first = 0; first < stored; first += chunk) {
      const uint64_t count = std::min(chunk, stored - first);
      std::vector<Frame> frames;
      PS_RETURN_IF_ERROR(from.CopyIds(t, first, count, &frames));
      const size_t row_bytes = frames[1].size() / count;
      const size_t use_bytes = frames.size() > 2 ? frames[2].size() / count : 0;
      std::vector<uint64_t> ids;
      std::vector<std::byte> rows, uses;
      for (uint64_t i = 0; i < count; ++i) {
        uint64_t id;
        std::memcpy(&id, frames[0].data() + i * sizeof(id), sizeof id);
        if (!own.Contains(IdSlot(id, seed, slots))) continue;
        ids.push_back(id);
        const auto* row = static_cast<const std::byte*>(frames[1].data()) + i * row_bytes;
        rows.insert(rows.end(), row, row + row_bytes);
        if (use_bytes > 0) {
          const auto* use = static_cast<const std::byte*>(frames[2].data()) + i * use_bytes;
          uses.insert(uses.end(), use, use + use_bytes);
        }
      }
      PS_RETURN_IF_ERROR(store->RestoreIds(t, ids, rows.data(),
                                           use_bytes > 0 ? uses.data() : nullptr));
    }
  }
  if (!sketch.empty()) {
    store->RestoreSketch(t, std::span<const std::byte>(
                                reinterpret_cast<const std::byte*>(sketch.data()),
                                sketch.size() * sizeof(uint16_t)));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<ShardStore>> PrefaultedStore(const JobOptions& to, uint32_t shard) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::CreateUnwritten(to, shard));
  // Zeros written into every row of the range tables, in pieces of 1 MiB
  // of floats: the memory is the store's (faulted in, huge pages found)
  // before the rows come.
  constexpr uint64_t kPieceFloats = 256 * 1024;
  const std::vector<float> zeros(kPieceFloats, 0.0f);
  const auto* zero = reinterpret_cast<const std::byte*>(zeros.data());
  const auto layouts = store->layouts();
  for (uint32_t t = 0; t < layouts.size(); ++t) {
    if (layouts[t].hashed) continue;  // rows made as ids come
    const uint64_t rows = std::max<uint64_t>(1, kPieceFloats / layouts[t].dim);
    const std::vector<const std::byte*> slots(to.tables[t].optimizer.Slots(), zero);
    for (uint64_t first = layouts[t].owned.begin; first < layouts[t].owned.end; first += rows) {
      store->RestoreRows(t, first, std::min(rows, layouts[t].owned.end - first), zero, slots);
    }
  }
  return store;
}

StatusOr<std::unique_ptr<ShardStore>> AssembleStore(const JobOptions& to, uint32_t shard,
                                                    std::span<ShardStore* const> old,
                                                    std::unique_ptr<ShardStore> into) {
  if (old.empty()) return InvalidArgumentError("no old shard's rows to build the shard from");
  for (const ShardStore* copy : old) {
    if (copy->sum_clocks() != 0) {
      return FailedPreconditionError("an old shard handed over with sums of synchronous "
                                     "aggregation not applied");
    }
  }
  std::unique_ptr<ShardStore> store = std::move(into);
  if (store == nullptr) {
    PS_ASSIGN_OR_RETURN(store, ShardStore::CreateUnwritten(to, shard));
  }
  const auto layouts = store->layouts();
  for (uint32_t t = 0; t < layouts.size(); ++t) {
    PS_RETURN_IF_ERROR(layouts[t].hashed ? AssembleHashed(to.tables[t], t, old, store.get())
                                         : AssembleRange(shard, t, old, store.get()));
  }
  return store;
}

StatusOr<BackupServer::State> ReshardFollower::Run() {
  const auto start = std::chrono::steady_clock::now();
  // The store to build at the handover, its memory faulted in first: at
  // the handover only the rows are copied. Then the old shards are asked
  // (ps_ctl waits for every follower's copy before it picks the handover
  // clock).
  StatusOr<std::unique_ptr<ShardStore>> prefaulted = PrefaultedStore(to_, shard_);
  PS_RETURN_IF_ERROR(prefaulted.status());
  const auto faulted = std::chrono::steady_clock::now();
  PS_RETURN_IF_ERROR(AskToFollow());
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  PS_LOG_INFO("{}: its store made in {:.0f} ms; {} old shards follow it {:.0f} ms later", Name(),
              ms(faulted - start), sources_.size(),
              ms(std::chrono::steady_clock::now() - faulted));
  PS_RETURN_IF_ERROR(Follow());
  const int64_t clock = copies_[0]->handed_over_clock();
  const auto handed = std::chrono::steady_clock::now();
  std::vector<BackupServer::State> copies;
  std::vector<ShardStore*> old;
  for (auto& copy : copies_) {
    copies.push_back(copy->TakeState());
    old.push_back(copies.back().store.get());
  }
  BackupServer::State state;
  PS_ASSIGN_OR_RETURN(state.store, AssembleStore(to_, shard_, old, std::move(*prefaulted)));
  // The clocks as the first old shard kept them (every shard saw the same
  // CLOCKs below the handover, none of it or later), and every old shard's
  // recent pushes.
  state.clocks = copies[0].clocks;
  state.recent_pushes = std::move(copies[0].recent_pushes);
  for (size_t k = 1; k < copies.size(); ++k) {
    if (!state.recent_pushes.Decode(copies[k].recent_pushes.Encode())) {
      return FailedPreconditionError("the recent pushes of shard " + std::to_string(sources_[k]) +
                                     " do not fit the job's workers");
    }
  }
  state.handover_clock = clock;
  state.slot = replica_;
  // Every replica of the shard built this same state (or restores it from
  // the handover generation): the primary's backups hold it.
  state.backups_hold_it = to_.replication.factor > 1;
  // The copies' memory goes back while the shard serves.
  retired_ = std::thread([retired = std::move(copies)]() mutable { retired.clear(); });
  if (state.clocks.min_clock() != clock) {
    PS_LOG_WARN("{}: the old shards handed over at clock {} with their minimum clock at {}",
                Name(), clock, state.clocks.min_clock());
  }
  PS_LOG_INFO("{}: followed {} old shards for {:.0f} ms; they handed over at clock {}, and its "
              "rows were in place {:.0f} ms later",
              Name(), sources_.size(), ms(handed - start), clock,
              ms(std::chrono::steady_clock::now() - handed));
  return state;
}

}  // namespace ps
