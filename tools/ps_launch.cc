// ps_launch: runs a whole job on this machine.
//
//   ps_launch --config job.yaml [--bin-dir DIR] [--grace-ms N]
//             [--log-level info]
//
// Starts one ps_server per cluster.servers entry and cluster.workers
// ps_worker processes, prefixes and interleaves their output on stdout, and
// stops the servers once every worker has finished (tools/launcher.h has the
// rules). Exit codes: 0 the job succeeded; 1 a child failed or could not be
// started; 2 bad command line or job file; 130 / 143 stopped by SIGINT /
// SIGTERM.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "common/logging.h"
#include "tools/launcher.h"
#include "worker/train_options.h"

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// The directory this binary was started from; ps_server and ps_worker are
// built next to it.
std::string OwnDirectory() {
  std::error_code error;
  std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return ".";
  return self.parent_path().string();
}

// From the build tree (bin_dir is build/bin), the Python module ps built
// beside it (build/python) goes first on PYTHONPATH for the workers a
// train.command starts (they inherit this process's environment). An
// installed module needs nothing.
void PutBuiltPythonModuleOnPath(const std::string& bin_dir) {
  std::error_code error;
  const std::filesystem::path python =
      std::filesystem::weakly_canonical(std::filesystem::path(bin_dir) / ".." / "python", error);
  if (error || !std::filesystem::exists(python / "ps" / "__init__.py", error)) return;
  const char* path = std::getenv("PYTHONPATH");
  const std::string joined =
      python.string() + (path != nullptr && *path != '\0' ? ":" + std::string(path) : "");
  ::setenv("PYTHONPATH", joined.c_str(), 1);
}

// ps_launch's flags.
struct LaunchFlags {
  std::string config_path;
  std::string bin_dir;
  int64_t grace_ms = 5000;
  std::string log_level = "info";
  bool resume = false;
  uint32_t max_processes = 0;
};

void AddFlags(CLI::App& app, LaunchFlags* f) {
  app.add_option("--config", f->config_path, "Job file (YAML)")->required();
  app.add_option("--bin-dir", f->bin_dir,
                 "Directory of ps_server and ps_worker (default: the "
                 "directory of ps_launch)");
  app.add_option("--grace-ms", f->grace_ms,
                 "Milliseconds between SIGTERM and SIGKILL when stopping "
                 "children")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--log-level", f->log_level,
                 "Log level of the launcher and its children: trace, debug, "
                 "info, warn, error, off")
      ->capture_default_str();
  app.add_flag("--resume", f->resume,
               "Resume from the newest checkpoint every shard holds, and fail if there is none "
               "(without it a job resumes when checkpoint.dir holds generations, else starts "
               "afresh)");
  app.add_option("--max-processes", f->max_processes,
                 "Refuse a job of more processes (servers + workers) than this, all of which "
                 "would run on this host (default 0: 16 per hardware thread, at least 64)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Runs a parameter-server job (servers and workers) on this "
      "machine."};
  LaunchFlags flags;
  AddFlags(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : kExitUsage;
  }

  ps::Status logging = ps::InitLogging("ps_launch", flags.log_level);
  if (!logging.ok()) {
    std::fprintf(stderr, "ps_launch: --log-level: %s\n",
                 logging.message().c_str());
    return kExitUsage;
  }

  // With the train section, so that a bad one is refused before any
  // process starts (the servers skip it).
  ps::StatusOr<ps::TrainJob> job = ps::LoadTrainJobFile(flags.config_path);
  if (!job.ok()) {
    std::fprintf(stderr, "ps_launch: bad job file: %s\n",
                 job.status().ToString().c_str());
    return kExitUsage;
  }

  if (job->train.program.empty()) {
    std::fprintf(stderr, "ps_launch: %s\n", ps::NoTrainSectionMessage(flags.config_path).c_str());
    return kExitUsage;
  }

  // Keep managing the children when stdout goes away (ps_launch | head):
  // writes then fail with EPIPE instead of killing the launcher, which would
  // take the children down with SIGKILL instead of an orderly stop.
  // Children start with default dispositions (common/subprocess.h).
  ::signal(SIGPIPE, SIG_IGN);

  ps::LauncherOptions options;
  options.bin_dir = flags.bin_dir.empty() ? OwnDirectory() : flags.bin_dir;
  options.grace = std::chrono::milliseconds(flags.grace_ms);
  options.log_level = flags.log_level;
  options.resume = flags.resume;
  options.max_processes = flags.max_processes;
  options.metrics_csv = job->train.metrics_csv;
  // The workers' own program (train.command), started with ps_worker's flags.
  options.worker_command = job->train.command;
  if (!options.worker_command.empty()) PutBuiltPythonModuleOnPath(options.bin_dir);
  // The launcher takes the job's JobOptions part; the train section is the
  // workers'.
  ps::Launcher launcher(std::move(*job), flags.config_path, options);
  ps::StatusOr<int> code = launcher.Run();
  if (!code.ok()) {
    std::fprintf(stderr, "ps_launch: %s\n", code.status().ToString().c_str());
    if (code.status().code() == ps::StatusCode::kNotFound) {
      std::fprintf(stderr,
                   "ps_launch: ps_server and ps_worker are looked for in "
                   "'%s'; use --bin-dir to point elsewhere\n",
                   options.bin_dir.c_str());
    }
    return code.status().code() == ps::StatusCode::kInvalidArgument
               ? kExitUsage
               : kExitFailed;
  }
  return *code;
}
