// ps_export: what `ps_ctl export` runs (tools/ctl_export.h): a checkpoint
// generation written as numpy .npy files and manifest.json
// (docs/checkpoints.md).
#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "tools/ctl_export.h"

int main(int argc, char** argv) {
  CLI::App app{
      "ps_ctl export: write a checkpoint generation of a job as numpy .npy files and "
      "manifest.json (docs/checkpoints.md); contacts no server"};
  app.name("ps_ctl export");
  ps::ExportFlags flags;
  ps::AddExportFlags(app, &flags);
  CLI11_PARSE(app, argc, argv);
  if (!ps::InitLogging("ps_ctl", "warn").ok()) return 2;
  return ps::RunExport(flags);
}
