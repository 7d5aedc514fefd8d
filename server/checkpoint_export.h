// `ps_ctl export`: a generation of a job's checkpoint written as plain
// arrays, numpy .npy files and a JSON manifest, for serving and analysis
// without the parameter server (the format: docs/checkpoints.md).
//
//   <out>/manifest.json            what the export holds (written last)
//   <out>/<table>.values.npy       rows x dim '<f4', C order
//   <out>/<table>.<slot>.npy       each optimizer state array, same shape
//   <out>/<table>.ids.npy          hashed tables: rows '<u8', ascending
//
// <table> is the table's name with every byte other than a letter, a
// digit, '_', '-' or a '.' that is not the first written as '%' and two
// upper-case hex digits (ExportFileStem); a .npy file is version 1.0.
//
// The arrays are written straight into the files through memory maps
// (space reserved first, so a full disk is an error, not a crash); what
// the export holds in memory besides is CheckpointArrays::ReadInto's: 16
// bytes per row of the hashed tables.
//
// Thread safety: functions of their arguments and the file system; two
// exports must not write the same folder at once.
#ifndef PS_SERVER_CHECKPOINT_EXPORT_H_
#define PS_SERVER_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "server/checkpoint_arrays.h"

namespace ps {

// The manifest's "format_version": a change to the files or the manifest's
// meaning makes a new one; new manifest fields may come without.
inline constexpr uint32_t kExportFormatVersion = 1;
// The manifest's "format".
inline constexpr std::string_view kExportFormatName = "ps-checkpoint-export";
inline constexpr std::string_view kExportManifestName = "manifest.json";

struct ExportOptions {
  // The generation to export; nullopt (the default): the newest clock that
  // every shard's folder holds complete.
  std::optional<int64_t> clock;
  // Write into an `out` folder that already holds files (those of the same
  // names are replaced, others left). Default false: such a folder is
  // refused.
  bool force = false;
  // Lines for people on what the export does (may be null).
  ArrayProgress progress;
};

// What ExportCheckpoint wrote.
struct ExportSummary {
  int64_t clock = 0;
  uint32_t num_shards = 0;
  size_t tables = 0;
  std::vector<std::string> files;  // names under `out`, manifest.json last
  uint64_t bytes = 0;              // of all files
};

// Writes the generation of `checkpoint_dir` (a job's checkpoint.dir) chosen
// by `options.clock` into the folder `out` (created with its parents when
// missing). The errors of CheckpointArrays::Open and ReadInto (NotFound,
// DataLoss naming the generation's path, ...); AlreadyExists when `out`
// holds files and not options.force; InvalidArgument when `out` is not a
// folder; the file system's errors naming the path (PermissionDenied,
// ResourceExhausted for a full disk, Internal). manifest.json is written
// last, through a rename: a folder whose export failed has none (with
// force, an old one is removed first).
StatusOr<ExportSummary> ExportCheckpoint(const std::string& checkpoint_dir, const std::string& out,
                                         const ExportOptions& options);

// The file name stem of table `name`, as the header says. Pure.
std::string ExportFileStem(std::string_view name);

// A .npy version 1.0 header for a C-order array of `descr` ("<f4", "<u8")
// and `shape`: magic, version, length and the header dict, padded with
// spaces to a multiple of 64 bytes and ended by '\n'. Pure.
std::string NpyHeader(std::string_view descr, std::span<const uint64_t> shape);

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_EXPORT_H_
