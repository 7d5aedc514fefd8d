// A generation with the chain of generations it builds on
// (server/checkpoint_db.h): a delta opened with its bases down to a full
// generation, each link checked against the next, and their records merged
// key by key in one pass (ReadGenerationDatabase of a delta, and every
// GenerationReader: a full generation is a chain of one). Part of the
// RocksDB adapter, with checkpoint_db.cc (server/checkpoint_rocksdb.h).
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "server/checkpoint_db.h"
#include "server/checkpoint_format.h"
#include "server/checkpoint_rocksdb.h"
#include "server/durable_dir.h"

namespace ps {
namespace {

// Generation `path` and, when it is a delta, the generations it builds on
// (each gen-<base clock> beside it), oldest (the full one) first, each link
// checked against the next (CheckChainLink), and the state of the newest
// against the bytes of all of them.
StatusOr<std::vector<OpenedGeneration>> OpenChain(const std::string& path) {
  std::vector<OpenedGeneration> chain;
  PS_ASSIGN_OR_RETURN(OpenedGeneration newest, OpenGeneration(path));
  chain.push_back(std::move(newest));
  // Base clocks decrease (DecodeMeta): the walk ends.
  while (chain.back().layout.delta()) {
    const OpenedGeneration& newer = chain.back();
    const int64_t base = newer.layout.base_clock;
    const std::string base_path =
        (std::filesystem::path(newer.path).parent_path() / GenerationName(base)).string();
    std::error_code ec;
    if (!std::filesystem::is_directory(base_path, ec)) {
      return DataLossError(newer.path + " is a delta on generation " + std::to_string(base) +
                           ", but " + base_path + " is missing (removed or pruned by hand): the " +
                           "chain of generations from " + path + " is broken; restore an older " +
                           "generation (--restore-clock) that does not build on it, or start " +
                           "with a new checkpoint.dir");
    }
    StatusOr<OpenedGeneration> older = OpenGeneration(base_path);
    if (!older.ok()) {
      return Status(older.status().code(),
                    older.status().message() + " (the base of the delta " + newer.path +
                        ", needed to read " + path + ")");
    }
    PS_RETURN_IF_ERROR(CheckChainLink(older->layout, base_path, newer.layout, newer.path));
    chain.push_back(std::move(*older));
  }
  std::reverse(chain.begin(), chain.end());
  if (chain.size() > 1) {
    Uint128 file_bytes = 0;
    for (const OpenedGeneration& link : chain) file_bytes += link.file_bytes;
    PS_ASSIGN_OR_RETURN(const Uint128 promised,
                        RowDataBytes(AsFullLayout(chain.back().layout), path));
    if (promised > file_bytes) {
      return DataLossError(path + ": the meta record promises more row data than the files of " +
                           "its chain of " + std::to_string(chain.size()) + " generations hold");
    }
  }
  return chain;
}

// "gen-30 (a delta; chain gen-10 <- gen-20 <- gen-30)" for errors about the
// state a chain merges to.
std::string ChainText(const std::vector<OpenedGeneration>& chain) {
  std::string text = chain.back().path;
  if (chain.size() == 1) return text;
  text += " (a delta; its chain: ";
  for (size_t i = 0; i < chain.size(); ++i) {
    if (i > 0) text += " <- ";
    text += std::filesystem::path(chain[i].path).filename().string();
  }
  return text + ")";
}

bool IsPatchKey(const rocksdb::Slice& key) {
  uint32_t table = 0;
  uint64_t row = 0;
  return DecodePatchKey(key.ToStringView(), &table, &row);
}

// The records of a chain's links in key order, merged: of the records of
// one key the newest link's wins, a delta's removed id (kRemovedRecord)
// hides the key, and a run record gets the row records ('p') of the links
// newer than its own put over its rows. `on_record` sees every record of
// every link (its link's index, for that link's checks), `on_winner` each
// key's winner that is not a removed id (a run with the rows put over it).
// The meta records, and the row records as records of their own, are left
// out. Stops at the first error.
class ChainMerge {
 public:
  ChainMerge(const std::vector<OpenedGeneration>& chain, const rocksdb::ReadOptions& ro)
      : chain_(chain) {
    rocksdb::ReadOptions patch_ro = ro;
    patch_ro.iterate_upper_bound = nullptr;
    for (const OpenedGeneration& link : chain) {
      its_.emplace_back(link.db->NewIterator(ro));
      bool patches = false;
      for (const TableSnapshot& t : link.layout.tables) patches |= !t.hashed && t.delta_rows > 0;
      patch_its_.emplace_back(patches ? link.db->NewIterator(patch_ro) : nullptr);
    }
  }
  void Seek(std::string_view begin) {
    for (auto& it : its_) begin.empty() ? it->SeekToFirst() : it->Seek(AsSlice(begin));
  }
  template <typename OnRecord, typename OnWinner>
  Status Run(OnRecord on_record, OnWinner on_winner) {
    const rocksdb::Slice meta = AsSlice(kMetaKey);
    for (;;) {
      int best = -1;
      for (size_t i = 0; i < its_.size(); ++i) {
        auto& it = its_[i];
        while (it->Valid() && (it->key() == meta || IsPatchKey(it->key()))) {
          if (it->key() != meta) {
            PS_RETURN_IF_ERROR(
                on_record(i, it->key().ToStringView(), it->value().ToStringView()));
          }
          it->Next();
        }
        if (!it->Valid()) continue;
        // On equal keys the newer link (a larger index) wins.
        if (best < 0 || it->key().compare(its_[best]->key()) <= 0) best = static_cast<int>(i);
      }
      if (best < 0) break;
      const std::string key = its_[best]->key().ToString();
      for (size_t i = 0; i < its_.size(); ++i) {
        auto& it = its_[i];
        if (!it->Valid() || it->key() != AsSlice(key)) continue;
        PS_RETURN_IF_ERROR(
            on_record(i, it->key().ToStringView(), it->value().ToStringView()));
        if (static_cast<int>(i) != best) it->Next();
      }
      auto& winner = its_[best];
      const bool removed =
          chain_[best].layout.delta() && winner->value().ToStringView() == kRemovedRecord;
      if (!removed) {
        std::string_view value = winner->value().ToStringView();
        PS_RETURN_IF_ERROR(PutRowsOver(static_cast<size_t>(best), key, &value));
        PS_RETURN_IF_ERROR(
            on_winner(static_cast<size_t>(best), winner->key().ToStringView(), value));
      }
      winner->Next();
    }
    for (size_t i = 0; i < its_.size(); ++i) {
      if (!its_[i]->status().ok()) {
        return RocksError(its_[i]->status(), chain_[i].path + ": cannot read the records",
                          StatusCode::kDataLoss);
      }
    }
    return Status::Ok();
  }

 private:
  // When `key` is a run record of link `link` (*value its value): the row
  // records of the newer links for its rows put over a copy of it, in link
  // order (the newest last), *value then viewing the copy. A record that
  // is not a whole run of its table is left to the checks.
  Status PutRowsOver(size_t link, const std::string& key, std::string_view* value) {
    uint32_t ti = 0;
    uint64_t first = 0;
    const ShardSnapshot& layout = chain_[link].layout;
    if (!DecodeRowKey(key, &ti, &first) || ti >= layout.tables.size()) return Status::Ok();
    const TableSnapshot& t = layout.tables[ti];
    if (t.hashed || !t.owned.Contains(first)) return Status::Ok();
    const uint64_t end = first + std::min(RowsPerRun(t.dim), t.owned.end - first);
    const size_t row_bytes = size_t{t.dim} * sizeof(float);
    const size_t piece = static_cast<size_t>(end - first) * row_bytes;
    const size_t pieces = 1 + t.slots.size();
    if (value->size() != piece * pieces) return Status::Ok();
    const std::string begin_key = PatchKey(ti, first), end_key = PatchKey(ti, end);
    bool copied = false;
    for (size_t i = link + 1; i < chain_.size(); ++i) {
      rocksdb::Iterator* it = patch_its_[i].get();
      if (it == nullptr || chain_[i].layout.tables[ti].delta_rows == 0) continue;
      // Runs come in key order: the iterator stands where the last run's
      // rows ended, and seeks (reading ahead) only to skip rows.
      if (!it->Valid() || it->key().compare(AsSlice(begin_key)) < 0) it->Seek(AsSlice(begin_key));
      for (; it->Valid() && it->key().compare(AsSlice(end_key)) < 0; it->Next()) {
        uint32_t table = 0;
        uint64_t row = 0;
        DecodePatchKey(it->key().ToStringView(), &table, &row);
        if (it->value().size() != row_bytes * pieces) {
          return DataLossError(chain_[i].path + ": the row record of table '" + t.name +
                               "' row " + std::to_string(row) + " has " +
                               std::to_string(it->value().size()) + " bytes, not " +
                               std::to_string(row_bytes * pieces));
        }
        if (!copied) patched_.assign(value->data(), value->size());
        copied = true;
        for (size_t k = 0; k < pieces; ++k) {
          std::memcpy(patched_.data() + k * piece + (row - first) * row_bytes,
                      it->value().data() + k * row_bytes, row_bytes);
        }
      }
      if (!it->status().ok()) {
        return RocksError(it->status(), chain_[i].path + ": cannot read the records",
                          StatusCode::kDataLoss);
      }
    }
    if (copied) *value = patched_;
    return Status::Ok();
  }

  const std::vector<OpenedGeneration>& chain_;
  std::vector<std::unique_ptr<rocksdb::Iterator>> its_;
  // Per link, an iterator over its row records (none for a link without).
  std::vector<std::unique_ptr<rocksdb::Iterator>> patch_its_;
  std::string patched_;  // a run with rows put over it
};

// Every record of one link of a chain against its own meta record.
Status CheckLink(const OpenedGeneration& link, const rocksdb::ReadOptions& ro) {
  RunChecker checker(link.layout, link.path, link.version);
  RunRecord run;
  std::unique_ptr<rocksdb::Iterator> it(link.db->NewIterator(ro));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key() == AsSlice(kMetaKey)) continue;
    PS_RETURN_IF_ERROR(checker.Next(it->key().ToStringView(), it->value().ToStringView(), &run));
  }
  if (!it->status().ok()) {
    return RocksError(it->status(), link.path + ": cannot read the records", StatusCode::kDataLoss);
  }
  return checker.Finish();
}

}  // namespace

StatusOr<int64_t> ReadGenerationDatabase(const std::string& path, RowSink* sink,
                                         const GenerationReadOptions& options) {
  PS_ASSIGN_OR_RETURN(std::vector<OpenedGeneration> chain, OpenChain(path));
  // A full generation's records are read on several threads; a delta's
  // chain is merged key by key in one pass.
  if (chain.size() == 1) return ReadFullGeneration(chain.front(), path, sink, options);
  const ShardSnapshot layout = AsFullLayout(chain.back().layout);
  // A chain's oldest version speaks for its keys' shapes (every link of a
  // chain is of format 6, its full one too, but for a chain of one).
  const uint32_t version = chain.front().version;
  const rocksdb::ReadOptions ro = ReadOptionsForRestore();
  PS_RETURN_IF_ERROR(sink->Begin(layout));

  // One pass over the records in key order: the hashed tables' rows, by
  // table and id, then the range tables', table by table, run by run. A
  // chain's records are merged, each link's checked as its own meta record
  // says and the merged ones as the newest's full state.
  const std::string where = ChainText(chain);
  RunChecker checker(layout, where, version);
  std::vector<RunChecker> link_checkers;
  if (chain.size() > 1) {
    for (const OpenedGeneration& link : chain) {
      link_checkers.emplace_back(link.layout, link.path, link.version);
    }
  }
  RunRecord run;
  RunRecord link_run;
  ChainMerge merge(chain, ro);
  merge.Seek("");
  const Status merged = merge.Run(
      [&](size_t link, std::string_view key, std::string_view value) -> Status {
        if (link_checkers.empty()) return Status::Ok();
        return link_checkers[link].Next(key, value, &link_run);
      },
      [&](size_t /*link*/, std::string_view key, std::string_view value) -> Status {
        PS_RETURN_IF_ERROR(checker.Next(key, value, &run));
        if (run.sketch) {
          sink->Sketch(run.table, {run.values, run.piece_bytes});
        } else if (run.piece_bytes > 0) {
          sink->Rows(run.table, run.first, run.count, run.values,
                     std::span<const std::byte* const>(run.slots, run.num_slots), run.use);
        }
        return Status::Ok();
      });
  Status checked = merged;
  for (size_t i = 0; checked.ok() && i < link_checkers.size(); ++i) {
    checked = link_checkers[i].Finish();
  }
  if (checked.ok()) checked = checker.Finish();
  if (checked.ok()) return layout.clock;
  // A damaged link may show first as a flaw of the merged state (a row
  // missing from a delta: the state has a row less): name the link when
  // one is at fault.
  if (checked.code() == StatusCode::kDataLoss && chain.size() > 1) {
    for (const OpenedGeneration& link : chain) PS_RETURN_IF_ERROR(CheckLink(link, ro));
  }
  return checked;
}

struct GenerationReader::Db {
  std::vector<OpenedGeneration> chain;
};

GenerationReader::GenerationReader(std::string path, std::unique_ptr<Db> db, ShardSnapshot layout,
                                   uint32_t version)
    : path_(std::move(path)), db_(std::move(db)), layout_(std::move(layout)), version_(version) {}

GenerationReader::~GenerationReader() = default;

StatusOr<std::unique_ptr<GenerationReader>> GenerationReader::Open(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::vector<OpenedGeneration> chain, OpenChain(path));
  auto db = std::make_unique<Db>();
  ShardSnapshot layout = AsFullLayout(chain.back().layout);
  const uint32_t version = chain.front().version;
  db->chain = std::move(chain);
  return std::unique_ptr<GenerationReader>(
      new GenerationReader(path, std::move(db), std::move(layout), version));
}

size_t GenerationReader::links() const { return db_->chain.size(); }

Status GenerationReader::Scan(
    std::string_view begin, std::string_view end,
    const std::function<Status(std::string_view key, std::string_view value)>& fn) const {
  rocksdb::ReadOptions ro = ReadOptionsForRestore();
  const rocksdb::Slice upper = AsSlice(end);
  ro.iterate_upper_bound = &upper;
  const std::vector<OpenedGeneration>& chain = db_->chain;
  ChainMerge merge(chain, ro);
  merge.Seek(begin);
  return merge.Run(
      [](size_t, std::string_view, std::string_view) { return Status::Ok(); },
      [&](size_t link, std::string_view key, std::string_view value) -> Status {
        Status s = fn(key, value);
        if (s.ok() || chain.size() == 1) return s;
        // Name the link the record came from.
        return Status(s.code(), s.message() + " (the record is " + chain[link].path +
                                    "'s, link " + std::to_string(link + 1) + " of the chain " +
                                    ChainText(chain) + ")");
      });
}

StatusOr<std::string> GenerationReader::Get(std::string_view key) const {
  // The newest link holding the key.
  const std::vector<OpenedGeneration>& chain = db_->chain;
  for (auto link = chain.rbegin(); link != chain.rend(); ++link) {
    std::string value;
    const rocksdb::Status rs = link->db->Get(ReadOptionsForRestore(), AsSlice(key), &value);
    if (rs.IsNotFound()) continue;
    if (!rs.ok()) {
      return RocksError(rs, link->path + ": cannot read a record", StatusCode::kDataLoss);
    }
    if (link->layout.delta() && value == kRemovedRecord) break;
    return value;
  }
  return NotFoundError(path_ + ": no record with that key");
}

}  // namespace ps
