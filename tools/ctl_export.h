// ps_ctl export (the program ps_export, which `ps_ctl export` runs): a
// generation of a job's checkpoint written as numpy .npy files and a JSON
// manifest (server/checkpoint_export.h), read from the shards' folders on
// this host; talks to no server. A program of its own so that ps_ctl links
// no RocksDB.
//   ps_ctl export --checkpoint-dir DIR [--clock C] --out OUT [--force]
//   ps_ctl export --config job.yaml [--clock C] --out OUT [--force]
// With --config alone, DIR is the job's checkpoint.dir. Progress goes to
// stderr, the summary to stdout. Exits 0 when the export is complete, 1
// when it failed (the error names the path and what to do), 2 on a bad
// flag or job file.
#ifndef PS_TOOLS_CTL_EXPORT_H_
#define PS_TOOLS_CTL_EXPORT_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace ps {

struct ExportFlags {
  std::string checkpoint_dir;    // --checkpoint-dir; empty: the job's checkpoint.dir
  std::string config;            // --config; empty: none
  std::optional<int64_t> clock;  // --clock; unset: the newest complete everywhere
  std::string out;               // --out
  bool force = false;            // --force
};

// Adds export's flags to `app`, written into `flags` (which must outlive
// the parse).
void AddExportFlags(CLI::App& app, ExportFlags* flags);

// Runs the export; returns the exit code.
int RunExport(const ExportFlags& flags);

}  // namespace ps

#endif  // PS_TOOLS_CTL_EXPORT_H_
