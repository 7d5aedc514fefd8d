// CheckpointDir: a generation's records (checkpoint_format.h) written into a
// database (checkpoint_db.h) under a .tmp name and made durable and visible
// (durable_dir.h).
#include "server/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>
#include <set>
#include <utility>

#include "common/logging.h"
#include "server/checkpoint_db.h"
#include "server/checkpoint_format.h"
#include "server/durable_dir.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

// Collects a generation into a ShardSnapshot (CheckpointDir::Read).
class SnapshotSink : public RowSink {
 public:
  explicit SnapshotSink(ShardSnapshot* out) : out_(out) {}
  Status Begin(const ShardSnapshot& layout) override {
    *out_ = layout;
    for (TableSnapshot& t : out_->tables) {
      const size_t n = *TableElements(t);  // checked by ReadGenerationDatabase
      t.values.resize(n);
      for (std::vector<float>& slot : t.slots) slot.resize(n);
      if (t.hashed) t.ids.reserve(t.stored_rows);
    }
    return Status::Ok();
  }
  void Rows(uint32_t table, uint64_t first, uint64_t count, const std::byte* values,
            std::span<const std::byte* const> slots, const std::byte* use) override {
    TableSnapshot& t = out_->tables[table];
    // A hashed table's rows come one at a time, in id order.
    const uint64_t row = t.hashed ? t.ids.size() : first - t.owned.begin;
    if (t.hashed) t.ids.push_back(first);
    if (use != nullptr) t.uses.push_back(DecodeRowUse(use));
    const size_t offset = static_cast<size_t>(row) * t.dim;
    const size_t bytes = static_cast<size_t>(count) * t.dim * sizeof(float);
    std::memcpy(t.values.data() + offset, values, bytes);
    for (size_t k = 0; k < slots.size(); ++k) {
      std::memcpy(t.slots[k].data() + offset, slots[k], bytes);
    }
  }
  void Sketch(uint32_t table, std::span<const std::byte> counters) override {
    out_->tables[table].sketch.assign(counters.begin(), counters.end());
  }
  // A range table's rows go to their own place in arrays sized by Begin.
  bool ConcurrentRangeRows() const override { return true; }

 private:
  ShardSnapshot* out_;
};

constexpr char kRecentMagic[4] = {'P', 'S', 'R', 'P'};
constexpr uint32_t kRecentFormat = 1;

// FNV-1a (64 bits) of `bytes`: the recent-pushes file's check.
uint64_t Fnv1a(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

template <typename T>
void AppendLittle(std::string* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

template <typename T>
T ReadLittle(const char* in) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return value;
}

}  // namespace

StatusOr<std::vector<uint64_t>> ReadRecentPushes(const std::string& generation) {
  const std::string path = (fs::path(generation) / kRecentPushesFile).string();
  std::vector<uint64_t> numbers;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (ec) return DataLossError(path + ": cannot be looked at: " + ec.message());
    return numbers;
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return DataLossError(path + ": cannot be read: " + ec.message());
  std::string bytes(static_cast<size_t>(size), '\0');
  std::ifstream in(path, std::ios::binary);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    return DataLossError(path + ": cannot be read");
  }
  const auto corrupt = [&](const std::string& what) {
    return DataLossError(path + " is corrupt: " + what +
                         "; the generation's rows do not depend on it: move it aside to restore "
                         "without it (a push applied before the generation and sent again "
                         "would then be applied twice)");
  };
  constexpr size_t kHead = sizeof kRecentMagic + 4 + 8;
  if (bytes.size() < kHead + 8) {
    return corrupt(std::to_string(bytes.size()) + " bytes, fewer than its header and hash");
  }
  if (std::memcmp(bytes.data(), kRecentMagic, sizeof kRecentMagic) != 0) {
    return corrupt("it does not start with \"PSRP\"");
  }
  const auto format = ReadLittle<uint32_t>(bytes.data() + 4);
  if (format != kRecentFormat) {
    return corrupt("format " + std::to_string(format) + ", not " + std::to_string(kRecentFormat));
  }
  const auto count = ReadLittle<uint64_t>(bytes.data() + 8);
  if (count != (bytes.size() - kHead - 8) / 8 || (bytes.size() - kHead) % 8 != 0) {
    return corrupt("it says " + std::to_string(count) + " numbers in " +
                   std::to_string(bytes.size()) + " bytes");
  }
  const size_t body = bytes.size() - 8;
  if (ReadLittle<uint64_t>(bytes.data() + body) != Fnv1a(std::string_view(bytes.data(), body))) {
    return corrupt("its hash does not match its bytes");
  }
  numbers.reserve(count);
  for (size_t at = kHead; at < body; at += 8) numbers.push_back(ReadLittle<uint64_t>(bytes.data() + at));
  return numbers;
}

Status CheckpointDir::WriteRecentPushes(const std::string& tmp,
                                        const std::vector<uint64_t>& numbers) {
  std::string bytes(kRecentMagic, sizeof kRecentMagic);
  AppendLittle<uint32_t>(&bytes, kRecentFormat);
  AppendLittle<uint64_t>(&bytes, numbers.size());
  for (uint64_t n : numbers) AppendLittle<uint64_t>(&bytes, n);
  AppendLittle<uint64_t>(&bytes, Fnv1a(bytes));
  const std::string path = tmp + "/" + std::string(kRecentPushesFile);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, files_->NewWritableFile(path));
  PS_RETURN_IF_ERROR(file->Append(bytes));
  return file->Close();
}

Status CheckpointDir::WriteShardsFile(const std::string& tmp, uint32_t num_shards) {
  return WriteEmptyFile(tmp + "/" + GenerationShardsFileName(num_shards));
}

Status CheckpointDir::WriteEmptyFile(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, files_->NewWritableFile(path));
  return file->Close();
}

std::string CheckpointDir::GenerationPath(int64_t clock) const {
  return (fs::path(path_) / GenerationName(clock)).string();
}

StatusOr<std::unique_ptr<CheckpointDir>> CheckpointDir::Open(const std::string& dir,
                                                             Filesystem* files) {
  std::unique_ptr<CheckpointDir> opened(new CheckpointDir(dir, files));
  PS_RETURN_IF_ERROR(CreateCheckpointFolder(*opened->files_, dir));
  return opened;
}

StatusOr<std::vector<int64_t>> CheckpointDir::Generations() const {
  return ListGenerations(*files_, path_);
}

Status CheckpointDir::Write(const ShardSnapshot& snapshot, const CheckpointWriteOptions& options) {
  if (snapshot.HasUnlistedRows()) {
    // Its shared hashed rows are listed on a copy (the chunks stay shared).
    ShardSnapshot listed = snapshot;
    listed.ListSharedRows();
    return WriteGeneration(listed, options, nullptr);
  }
  return WriteGeneration(snapshot, options, nullptr);
}

Status CheckpointDir::Write(ShardSnapshot&& snapshot, const CheckpointWriteOptions& options) {
  Status written;
  try {
    snapshot.ListSharedRows();
    written = WriteGeneration(snapshot, options, &snapshot);
  } catch (const std::bad_alloc&) {
    written = ResourceExhaustedError("out of memory listing the rows of checkpoint " +
                                     GenerationPath(snapshot.clock));
  }
  // Released also when the write stopped early.
  for (TableSnapshot& t : snapshot.tables) {
    t.shared.clear();
    t.patched_blocks.clear();
    t.hashed_rows = SharedHashedRows();  // the store saves nothing more for it
  }
  return written;
}

Status CheckpointDir::WriteGeneration(const ShardSnapshot& snapshot,
                                      const CheckpointWriteOptions& options,
                                      ShardSnapshot* release) {
  const std::string final_path = GenerationPath(snapshot.clock);
  if (options.keep < 1) return InvalidArgumentError(final_path + ": keep must be at least 1");
  PS_RETURN_IF_ERROR(ValidateForWrite(snapshot, final_path));
  const std::string tmp = TmpName(final_path);
  const auto stage = [&](CheckpointStage s) {
    if (options.at_stage) options.at_stage(s, snapshot.clock, tmp);
  };

  if (snapshot.delta()) {
    // A delta on a generation that is gone could never be read.
    const std::string base = GenerationPath(snapshot.base_clock);
    PS_ASSIGN_OR_RETURN(const Filesystem::Type type, files_->TypeOf(base));
    if (type != Filesystem::Type::kDirectory) {
      return FailedPreconditionError(final_path + ": not written as a delta on " + base +
                                     ", which is missing; write a full generation");
    }
  }

  // Torn writes of earlier attempts (of any clock) first; not the
  // unfinished one of the process this folder is shared with (a reshard in
  // memory).
  const int64_t handover = shared_handover_.load(std::memory_order_relaxed);
  const bool as_old = shared_as_old_.load(std::memory_order_relaxed);
  PS_RETURN_IF_ERROR(RemoveTornGenerations(*files_, path_, [&](int64_t clock) {
    return handover >= 0 && (as_old ? clock > handover : clock == handover);
  }));

  Status written;
  try {
    RowsWrittenFn rows_written;
    if (release != nullptr) {
      rows_written = [release](uint32_t table, uint64_t end) {
        release->tables[table].ReleaseShared(end);
      };
    }
    written = WriteGenerationDatabase(*files_, snapshot, tmp, options.at_stage, rows_written);
    if (written.ok()) written = WriteShardsFile(tmp, snapshot.num_shards);
    if (written.ok() && !snapshot.recent_pushes.empty()) {
      written = WriteRecentPushes(tmp, snapshot.recent_pushes);
    }
    if (written.ok() && snapshot.delta()) {
      written = WriteEmptyFile(tmp + "/" + GenerationBaseFileName(snapshot.base_clock));
    }
    if (written.ok()) stage(CheckpointStage::kFlushed);
    if (written.ok() && options.sync) written = SyncFlatFolder(*files_, tmp);
    if (written.ok()) stage(CheckpointStage::kSynced);
    if (written.ok()) written = PublishGeneration(*files_, tmp, final_path, options.sync);
    if (written.ok()) stage(CheckpointStage::kPublished);
  } catch (const std::bad_alloc&) {
    written = ResourceExhaustedError("out of memory writing " + tmp);
  }
  if (!written.ok()) {
    files_->RemoveTree(tmp).IgnoreError();
    return written;
  }

  // The generations the kept ones build on stay too.
  StatusOr<std::set<int64_t>> needed = GenerationsNeeded(*files_, path_, options.keep);
  const Status pruned =
      needed.ok()
          ? PruneGenerations(
                *files_, path_, options.keep, options.sync,
                [&](const std::string& /*doomed*/) { stage(CheckpointStage::kPruning); }, &*needed)
          : needed.status();
  if (!pruned.ok()) {
    // The new generation is complete and visible; the next Write tries again.
    PS_LOG_WARN("checkpoint {} written, but removing older generations failed: {}", final_path,
                pruned.ToString());
  }
  return Status::Ok();
}

Status CheckpointDir::ReadInto(int64_t clock, RowSink* sink,
                               const GenerationReadOptions& options) const {
  const std::string path = GenerationPath(clock < 0 ? 0 : clock);
  if (clock < 0) {
    return NotFoundError(path_ + ": no generation of negative clock " + std::to_string(clock));
  }
  const StatusOr<Filesystem::Type> type = files_->TypeOf(path);
  if (!type.ok()) {
    const StatusCode code = type.status().code() == StatusCode::kInternal ? StatusCode::kDataLoss
                                                                          : type.status().code();
    return Status(code, path + ": cannot read the generation: " + type.status().message());
  }
  if (*type != Filesystem::Type::kDirectory) return NotFoundError(path + ": no such generation");
  StatusOr<int64_t> read = [&]() -> StatusOr<int64_t> {
    try {
      return ReadGenerationDatabase(path, sink, options);
    } catch (const std::bad_alloc&) {
      return ResourceExhaustedError(path + ": out of memory reading the generation");
    }
  }();
  if (!read.ok()) return read.status();
  if (*read != clock) {
    return DataLossError(path + ": the meta record says clock " + std::to_string(*read));
  }
  return Status::Ok();
}

StatusOr<ShardSnapshot> CheckpointDir::Read(int64_t clock,
                                             const GenerationReadOptions& options) const {
  ShardSnapshot snapshot;
  SnapshotSink sink(&snapshot);
  PS_RETURN_IF_ERROR(ReadInto(clock, &sink, options));
  return snapshot;
}

}  // namespace ps
