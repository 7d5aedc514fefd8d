#include "tools/ctl_export.h"

#include <cstdio>

#include "common/config.h"
#include "server/checkpoint_export.h"

namespace ps {

void AddExportFlags(CLI::App& app, ExportFlags* flags) {
  CLI::App* sub = &app;
  sub->add_option("--checkpoint-dir", flags->checkpoint_dir,
                  "the job's checkpoint.dir (holding shard-0, shard-1, ...); default: the "
                  "checkpoint.dir of --config");
  sub->add_option("--config", flags->config, "job YAML file whose checkpoint.dir to export");
  sub->add_option("--clock", flags->clock,
                  "the generation's clock (default: the newest that every shard holds complete)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--out", flags->out, "folder to write into (created when missing)")->required();
  sub->add_flag("--force", flags->force,
                "write into a folder that already holds files (files of the same names are "
                "replaced)");
}

int RunExport(const ExportFlags& flags) {
  std::string dir = flags.checkpoint_dir;
  if (dir.empty()) {
    if (flags.config.empty()) {
      std::fprintf(stderr,
                   "ps_ctl export: which checkpoint? Give --checkpoint-dir DIR (a job's "
                   "checkpoint.dir) or --config job.yaml\n");
      return 2;
    }
    auto job = LoadJobFile(flags.config);
    if (!job.ok()) {
      std::fprintf(stderr, "ps_ctl export: %s\n", job.status().ToString().c_str());
      return 2;
    }
    if (job->checkpoint.dir.empty()) {
      std::fprintf(stderr, "ps_ctl export: %s has no checkpoint.dir; give --checkpoint-dir DIR\n",
                   flags.config.c_str());
      return 2;
    }
    dir = job->checkpoint.dir;
  }
  ExportOptions options;
  options.clock = flags.clock;
  options.force = flags.force;
  options.progress = [](const std::string& line) {
    std::fprintf(stderr, "ps_ctl export: %s\n", line.c_str());
  };
  const StatusOr<ExportSummary> done = ExportCheckpoint(dir, flags.out, options);
  if (!done.ok()) {
    std::fprintf(stderr, "ps_ctl export: %s\n", done.status().ToString().c_str());
    return 1;
  }
  std::printf("exported generation %lld of %s (%u shards, %zu tables) to %s: %zu files, %.1f MB\n",
              static_cast<long long>(done->clock), dir.c_str(), done->num_shards, done->tables,
              flags.out.c_str(), done->files.size(), static_cast<double>(done->bytes) / 1e6);
  return 0;
}

}  // namespace ps
