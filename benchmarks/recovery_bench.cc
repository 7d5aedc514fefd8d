// recovery_bench: how long one shard takes from being killed to serving
// again, with real processes, against the disk's plain cold read of the
// checkpoint generation it restores (the floor a restore cannot beat).
//
// Workload: a job with one shard (ps_server on 127.0.0.1 at a free port)
// and 1 worker; one table "emb" of --rows rows (default 100M) x --dim
// (default 1), init uniform (scale 0.01, as an embedding would be), optimizer
// adam, so values + 2 slots: 1.2 GB of state at the defaults; consistency
// bsp (no parameter cache, so every pull goes to the shard);
// checkpoint { dir, every_clocks 10^9 (never on its own), sync true, keep 1 }.
// The job's YAML and the checkpoints live in a folder of their own under
// --dir (default /var/tmp), removed at the end.
//
// Setup: start ps_server (the binary next to this one, or in --bin-dir) and
// wait for its "serving" log line; a Client as worker 0 Join()s, pushes
// one dense gradient (so adam's slots are not zero) and ends clock 0; a
// control client asks CheckpointServers() and polls StructuredStats() until
// the shard reports checkpoint last_clock 1, not writing (the generation
// gen-1 is written and synced); worker 0 pulls a probe row (the last row) to know its value.
//
// Each run (--runs, default 3):
//   1. With --drop-caches (default on when running as root): sync and write
//      3 to /proc/sys/vm/drop_caches, so the restarted server reads the
//      generation (and its own binary) from disk. Untimed: done before the
//      kill.
//   2. SIGSTOP the server (and wait until /proc says it is stopped); worker
//      0 issues a Pull of the probe row from a thread of its own. The
//      stopped server cannot answer it, so the pull is in flight over the
//      kill and completes only through the client's reconnect-and-resend.
//   3. t0: SIGKILL the server. A control client (from before the kill)
//      calls Stats() from another thread at once; the request waits for the
//      shard like any other.
//   4. Reap the killed process, then spawn a new ps_server on the same
//      config and port at once (what ps_launch does), its output read line
//      by line on a thread and each line stamped when it arrives.
//   5. Wait for the pull and the STATS reply. The pulled value must equal
//      the probe's value bit for bit (the restored state), the STATS text
//      must say "recovery started_clock 1", and the worker's client must
//      count one more reconnect and at least one request sent again.
//   6. The floor: drop the page cache again (when allowed), then read every
//      file under the generation's folder with 1 MiB read() calls into one
//      buffer (already touched), timed.
//
// Reported per run, seconds from t0 (the SIGKILL) unless said otherwise:
//   reap          the killed process is reaped (the kernel freed its memory)
//   restored      the new server's "restored <gen> ..." line arrives:
//                 exec, config, ShardStore::Create (allocation and init of
//                 every row), CheckpointDir::Read, ShardStore::Restore
//   serving       its "serving" line arrives (socket bound, loop starting)
//   STATS         the control client's Stats() returned: kill -> serving
//   pull          the in-flight pull completed (the worker's view)
//   process s     spawn -> "serving" line: the new process's own start-up
//   reconnect s   "serving" line -> STATS answered: ZeroMQ's reconnect
//                 interval (100 ms) plus the resend and the reply
//   plain read    seconds and MB/s of the plain cold read of the generation
//   / plain       STATS / plain read: how far recovery is above the floor
// If the server's "restored" line carries its own time (" in X s"), it is
// shown too. The summary row has the medians over runs. Printed below the
// table, for reference: ShardStore::Create of the same table in this
// process, with the job's init (what a server with nothing to restore does)
// and without computing it (what a server about to restore does: the
// allocation and page faults alone), timed once before the server starts.
// MB = 10^6 bytes. --quick (100,000 rows, 1 run, no cache dropping) is the
// ctest smoke test; its numbers mean nothing.

#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchmarks/machine.h"
#include "client/client.h"
#include "client/control_client.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/options.h"
#include "common/status.h"
#include "common/watched_process.h"
#include "store/huge_memory.h"
#include "store/shard_store.h"

namespace ps {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kReadBytes = size_t{1} << 20;
// Requests (and the wait for a server that went away): generous, so a slow
// disk does not turn a slow restore into a failure, yet a run that fails
// (the new server does not come up) reports within two minutes.
constexpr uint32_t kRequestTimeoutMs = 120000;
constexpr auto kStartTimeout = std::chrono::seconds(600);

struct Config {
  uint64_t rows = 100000000;
  uint32_t dim = 1;
  int runs = 3;
  std::string dir = "/var/tmp";  // parent of the benchmark's own folder
  std::string bin_dir;           // where ps_server is; default: next to this binary
  bool drop_caches = false;
  bool huge_pages = true;  // server.huge_pages, and this process's own stores
  uint32_t reconnect_ms = 20;  // liveness.reconnect_ms: how often the clients try again
};

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

// Shard 0 of the job in `config`, its lines echoed to stderr.
StatusOr<std::unique_ptr<WatchedProcess>> StartServer(const std::string& binary,
                                                      const std::string& config) {
  SubprocessOptions options;
  options.argv = {binary, "--config", config, "--shard", "0"};
  return WatchedProcess::Start(std::move(options), "  | ");
}

// Seconds of a " in 1.23 s" (or " in 456 ms") in the server's "restored"
// line, where a version of the server reports its own restore time.
std::optional<double> RestoreSecondsInLog(const std::string& line) {
  static const std::regex kIn(R"( in ([0-9]+(?:\.[0-9]+)?) ?(ms|s)\b)");
  const size_t at = line.find("restored ");
  if (at == std::string::npos) return std::nullopt;
  std::smatch m;
  const std::string rest = line.substr(at);
  if (!std::regex_search(rest, m, kIn)) return std::nullopt;
  const double v = std::stod(m[1].str());
  return m[2].str() == "ms" ? v / 1000 : v;
}

struct Run {
  double reap = 0, spawn = 0, restored = 0, serving = 0, stats = 0, pull = 0;  // from t0
  std::optional<double> log_restore;  // the server's own figure, if it logs one
  double plain_s = 0;
  uint64_t plain_bytes = 0;
  bool cold = false;
  double process() const { return serving - spawn; }
  double reconnect() const { return stats - serving; }
  double ratio() const { return stats / plain_s; }
};

struct Setup {
  uint64_t state_bytes = 0;
  uint64_t disk_bytes = 0;
  double store_create_s = 0;        // ShardStore::Create in this process, for reference
  double store_create_zeros_s = 0;  // ... with init zeros
  double first_start_s = 0;         // the first server: spawn -> serving (no checkpoint yet)
  double push_s = 0;
  std::string write_line;  // the server's "checkpoint ... written" line
};

// Restores are measured on the generation this writes: start, push, checkpoint.
Status Prepare(const std::string& server_bin, const std::string& config_path, const JobOptions& job,
               std::unique_ptr<WatchedProcess>* server, Client* worker, ControlClient* control,
               std::string* generation, Setup* setup) {
  PS_ASSIGN_OR_RETURN(*server, StartServer(server_bin, config_path));
  PS_ASSIGN_OR_RETURN(const SteadyClock::time_point serving,
                      (*server)->WaitForLine(" serving ", kStartTimeout));
  setup->first_start_s = Seconds(serving - (*server)->spawned());
  PS_RETURN_IF_ERROR(worker->Join());
  const TableOptions& t = job.tables[0];
  std::vector<float> gradient(t.rows * t.dim);
  for (size_t i = 0; i < gradient.size(); ++i) {
    gradient[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 13) - 6);
  }
  Status pushed = Status::Ok();
  setup->push_s = Time([&] {
    StatusOr<Ticket> push = worker->PushDense(0, SharedFloats::Take(std::move(gradient)));
    pushed = push.ok() ? worker->Wait(*push) : push.status();
    if (pushed.ok()) {
      StatusOr<Ticket> clock = worker->Clock();
      pushed = clock.ok() ? worker->Wait(*clock) : clock.status();
    }
  });
  PS_RETURN_IF_ERROR(pushed.WithContext("pushing the gradient"));
  PS_ASSIGN_OR_RETURN(std::vector<std::string> gens, control->CheckpointServers());
  *generation = gens.at(0);
  const auto deadline = SteadyClock::now() + kStartTimeout;
  while (true) {
    PS_ASSIGN_OR_RETURN(ShardStats stats, control->StructuredStats(0));
    if (stats.checkpoint.last_clock == worker->clock() && !stats.checkpoint.writing) break;
    if (SteadyClock::now() > deadline) {
      return DeadlineExceededError("the checkpoint was not written within 600 s; STATS:\n" +
                                   ShardStatsText(stats));
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  if (auto failed = (*server)->FindLine(" failed: ")) {
    return InternalError("the checkpoint failed: " + *failed);
  }
  if (!fs::is_directory(*generation)) {
    return NotFoundError("the server reported " + *generation + " but it is not a folder");
  }
  setup->write_line = (*server)->FindLine(" written to ").value_or("");
  for (const auto& e : fs::recursive_directory_iterator(*generation)) {
    if (e.is_regular_file()) setup->disk_bytes += e.file_size();
  }
  return Status::Ok();
}

StatusOr<Run> RunOnce(const Config& cfg, const std::string& server_bin,
                      const std::string& config_path, const std::string& generation,
                      uint64_t probe_row, float probe_value, std::unique_ptr<WatchedProcess>* server,
                      Client* worker, ControlClient* control, std::vector<char>* buffer) {
  Run run;
  run.cold = cfg.drop_caches;
  if (cfg.drop_caches) PS_RETURN_IF_ERROR(DropCaches("--no-drop-caches"));
  const uint64_t reconnects_before = worker->counters().reconnects;
  const uint64_t resent_before = worker->counters().resent;

  // The victim stops, so the pull below stays unanswered until the kill.
  PS_RETURN_IF_ERROR((*server)->Signal(SIGSTOP));
  for (int i = 0; ProcessState((*server)->pid()) != 'T'; ++i) {
    if (i > 2000) return InternalError("ps_server did not stop after SIGSTOP within 2 s");
    std::this_thread::sleep_for(milliseconds(1));
  }
  const std::vector<uint64_t> rows = {probe_row};
  std::vector<float> pulled(cfg.dim, -1.0f);
  std::promise<void> issued;
  Status pull_status = Status::Ok();
  SteadyClock::time_point pull_done;
  std::thread puller([&] {
    StatusOr<Ticket> t = worker->Pull(0, rows, pulled.data());
    issued.set_value();
    pull_status = t.ok() ? worker->Wait(*t) : t.status();
    pull_done = SteadyClock::now();
  });
  issued.get_future().wait();
  // Let ZeroMQ's I/O thread put it on the wire to the stopped server.
  std::this_thread::sleep_for(milliseconds(50));

  const SteadyClock::time_point t0 = SteadyClock::now();
  Status killed = (*server)->Signal(SIGKILL);
  StatusOr<ShardStats> stats = InternalError("not asked");
  SteadyClock::time_point stats_done;
  std::thread asker([&] {
    stats = control->StructuredStats(0);
    stats_done = SteadyClock::now();
  });
  // Whatever fails below, both threads are joined before returning.
  struct Joiner {
    std::thread* a;
    std::thread* b;
    ~Joiner() {
      if (a->joinable()) a->join();
      if (b->joinable()) b->join();
    }
  } joiner{&puller, &asker};
  PS_RETURN_IF_ERROR(killed);
  PS_RETURN_IF_ERROR((*server)->WaitFor(milliseconds(30000)).status());
  run.reap = Seconds(SteadyClock::now() - t0);
  server->reset();  // reaped: joins its reader

  PS_ASSIGN_OR_RETURN(*server, StartServer(server_bin, config_path));
  run.spawn = Seconds((*server)->spawned() - t0);
  // The server's lines first: a server that does not come up is reported
  // as such (the joins below then wait for the requests' deadlines).
  std::string restored_line;
  PS_ASSIGN_OR_RETURN(const SteadyClock::time_point restored,
                      (*server)->WaitForLine(": restored ", kStartTimeout, &restored_line));
  PS_ASSIGN_OR_RETURN(const SteadyClock::time_point serving,
                      (*server)->WaitForLine(" serving ", kStartTimeout));
  puller.join();
  asker.join();
  PS_RETURN_IF_ERROR(pull_status.WithContext("the pull in flight over the kill"));
  PS_RETURN_IF_ERROR(stats.status().WithContext("STATS after the kill"));
  run.restored = Seconds(restored - t0);
  run.serving = Seconds(serving - t0);
  run.stats = Seconds(stats_done - t0);
  run.pull = Seconds(pull_done - t0);
  run.log_restore = RestoreSecondsInLog(restored_line);

  // Checks: the restored state, and the path the pull took.
  if (std::memcmp(&pulled[0], &probe_value, sizeof(float)) != 0) {
    return DataLossError("row " + std::to_string(probe_row) + " pulled over the restart is " +
                         std::to_string(pulled[0]) + ", not " + std::to_string(probe_value) +
                         " as before the kill");
  }
  if (restored_line.find(generation) == std::string::npos) {
    return InternalError("the new server restored something else than " + generation + ": " +
                         restored_line);
  }
  if (stats->started_clock != worker->clock()) {
    return InternalError("STATS after the restart does not show the restored clock:\n" +
                         ShardStatsText(*stats));
  }
  if (worker->counters().reconnects != reconnects_before + 1 ||
      worker->counters().resent <= resent_before) {
    return InternalError("the worker's client counted " +
                         std::to_string(worker->counters().reconnects - reconnects_before) +
                         " reconnects and " +
                         std::to_string(worker->counters().resent - resent_before) +
                         " requests sent again over the restart (want 1 and at least 1)");
  }
  if (run.pull <= 0 || run.stats <= 0) {
    return InternalError("a request was answered before the kill");
  }

  // The floor: the generation's files read cold, plainly.
  if (cfg.drop_caches) PS_RETURN_IF_ERROR(DropCaches("--no-drop-caches"));
  StatusOr<uint64_t> bytes = InternalError("not read");
  run.plain_s = Time([&] { bytes = ReadTree(generation, buffer); });
  PS_RETURN_IF_ERROR(bytes.status());
  run.plain_bytes = *bytes;
  return run;
}

Status RunAll(const Config& cfg) {
  PS_ASSIGN_OR_RETURN(const std::string server_bin, ExecutableIn(cfg.bin_dir, "ps_server"));
  SetHugePages(cfg.huge_pages);
  std::error_code ec;
  const fs::path folder = fs::path(cfg.dir) / ("ps_recovery_bench_" + std::to_string(::getpid()));
  fs::create_directories(folder, ec);
  if (ec) return InternalError("cannot create " + folder.string() + ": " + ec.message());
  ScratchDir scratch(folder);  // declared before the server: removed after it is killed
  PS_ASSIGN_OR_RETURN(const int port, FreePort());
  const std::string config_path = (folder / "job.yaml").string();
  {
    std::ofstream yaml(config_path);
    yaml << "cluster: { servers: [\"127.0.0.1:" << port << "\"], workers: 1 }\n"
         << "tables:\n"
         << "  - { name: emb, rows: " << cfg.rows << ", dim: " << cfg.dim
         << ", init: { type: uniform, scale: 0.01 }, optimizer: { type: adam, lr: 0.001 } }\n"
         << "consistency: { mode: bsp }\n"
         << "client: { request_timeout_ms: " << kRequestTimeoutMs << " }\n"
         << "server: { huge_pages: " << (cfg.huge_pages ? "true" : "false") << " }\n"
         << "liveness: { server_down_timeout_ms: " << kRequestTimeoutMs
         << ", reconnect_ms: " << cfg.reconnect_ms << " }\n"
         << "checkpoint: { dir: \"" << (folder / "ckpt").string()
         << "\", every_clocks: 1000000000, sync: true, keep: 1 }\n";
    if (!yaml) return InternalError("cannot write " + config_path);
  }
  PS_ASSIGN_OR_RETURN(const JobOptions job, LoadJobFile(config_path));

  Setup setup;
  const TableOptions& table = job.tables[0];
  setup.state_bytes = table.rows * table.dim * sizeof(float) * (1 + table.optimizer.Slots());
  {
    // Reference for the reading: what allocating and initializing the
    // store costs, part of every start of the server.
    StatusOr<std::unique_ptr<ShardStore>> store = InternalError("not made");
    setup.store_create_s = Time([&] { store = ShardStore::Create(job, 0); });
    PS_RETURN_IF_ERROR(store.status());
    store = InternalError("freed");
    // Without the init, as a server about to restore creates it: the
    // allocation and page faults alone.
    setup.store_create_zeros_s =
        Time([&] { store = ShardStore::Create(job, 0, /*initialize=*/false); });
    PS_RETURN_IF_ERROR(store.status());
  }

  const auto began = SteadyClock::now();
  std::unique_ptr<WatchedProcess> server;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Client> worker, Client::Create(job, 0));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ControlClient> control, ControlClient::Create(job));
  std::string generation;
  std::fprintf(stderr, "recovery_bench: starting ps_server, pushing, writing a checkpoint ...\n");
  PS_RETURN_IF_ERROR(Prepare(server_bin, config_path, job, &server, worker.get(), control.get(),
                             &generation, &setup));
  const uint64_t probe_row = table.rows - 1;
  std::vector<float> probe(table.dim);
  const std::vector<uint64_t> probe_rows = {probe_row};
  PS_RETURN_IF_ERROR(worker->PullSync(0, probe_rows, probe.data()));

  std::vector<char> buffer(kReadBytes, 1);
  std::vector<Run> runs;
  for (int r = 0; r < cfg.runs; ++r) {
    std::fprintf(stderr, "recovery_bench: run %d: kill and restart ...\n", r + 1);
    PS_ASSIGN_OR_RETURN(Run run, RunOnce(cfg, server_bin, config_path, generation, probe_row,
                                         probe[0], &server, worker.get(), control.get(), &buffer));
    std::fprintf(stderr,
                 "recovery_bench: run %d: reaped %.3f s, spawned %.3f s, restored %.3f s, serving "
                 "%.3f s, STATS %.3f s, pull %.3f s after the kill; plain read %.3f s\n",
                 r + 1, run.reap, run.spawn, run.restored, run.serving, run.stats, run.pull,
                 run.plain_s);
    runs.push_back(run);
  }
  const double total = Seconds(SteadyClock::now() - began);
  if (Status down = control->ShutdownServers(); down.ok()) {
    server->WaitFor(milliseconds(30000)).status().IgnoreError();
  }
  server.reset();

  const auto med = [&](auto field) {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(field(r));
    return Median(v);
  };
  const auto mbs = [](uint64_t bytes, double s) { return static_cast<double>(bytes) / 1e6 / s; };
  std::printf("# recovery_bench: one shard from SIGKILL to serving again, real processes\n\n");
  std::printf(
      "%u hardware threads, CPU %s. One ps_server, one table of %" PRIu64
      " rows x dim %u with "
      "adam (values + 2 slots: %.0f MB of state; the generation is %.0f MB on disk, written "
      "with sync), files under %s; page cache %s before each restart and before each plain "
      "read; %d run(s), %.0f s in all. Seconds from the SIGKILL unless said otherwise; the last "
      "row has the medians.\n\n",
      std::thread::hardware_concurrency(), CpuModel().c_str(), table.rows, table.dim,
      static_cast<double>(setup.state_bytes) / 1e6, static_cast<double>(setup.disk_bytes) / 1e6,
      cfg.dir.c_str(), cfg.drop_caches ? "DROPPED (cold)" : "NOT dropped (warm)", cfg.runs, total);
  const bool log_restore = runs[0].log_restore.has_value();
  std::printf(
      "| run | reaped | restored | serving | kill → serving (STATS) | kill → pull | process "
      "(spawn → serving) s |%s reconnect (serving → STATS) s | plain %s read s | MB/s | "
      "serving / plain read |\n",
      log_restore ? " server's own restore s |" : "", cfg.drop_caches ? "cold" : "warm");
  std::printf("|---|---:|---:|---:|---:|---:|---:|%s---:|---:|---:|---:|\n",
              log_restore ? "---:|" : "");
  const auto row = [&](const std::string& name, double reap, double restored, double serving,
                       double stats, double pull, double process, double own, double reconnect,
                       double plain, double plain_mbs, double ratio) {
    char own_cell[32] = "";
    if (log_restore) std::snprintf(own_cell, sizeof own_cell, " %.2f |", own);
    std::printf("| %s | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f |%s %.3f | %.2f | %.0f | %.2f |\n",
                name.c_str(), reap, restored, serving, stats, pull, process, own_cell, reconnect,
                plain, plain_mbs, ratio);
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    row(std::to_string(i + 1), r.reap, r.restored, r.serving, r.stats, r.pull, r.process(),
        r.log_restore.value_or(0), r.reconnect(), r.plain_s, mbs(r.plain_bytes, r.plain_s),
        r.ratio());
  }
  row("median", med([](const Run& r) { return r.reap; }),
      med([](const Run& r) { return r.restored; }), med([](const Run& r) { return r.serving; }),
      med([](const Run& r) { return r.stats; }), med([](const Run& r) { return r.pull; }),
      med([](const Run& r) { return r.process(); }),
      med([](const Run& r) { return r.log_restore.value_or(0); }),
      med([](const Run& r) { return r.reconnect(); }), med([](const Run& r) { return r.plain_s; }),
      med([&](const Run& r) { return mbs(r.plain_bytes, r.plain_s); }),
      med([](const Run& r) { return r.ratio(); }));
  std::printf(
      "\nserver.huge_pages: %s, liveness.reconnect_ms: %u. For reference, in this process: ShardStore::Create of the same table with its init "
      "(a server with nothing to restore) %.2f s; without computing the init (a server about "
      "to restore: allocation and page faults alone) %.2f s. "
      "Setup: the first server started in %.2f s (nothing to restore), the gradient push took "
      "%.2f s; the server's write of the generation: %s\n",
      cfg.huge_pages ? "true" : "false", cfg.reconnect_ms, setup.store_create_s, setup.store_create_zeros_s,
      setup.first_start_s, setup.push_s,
      setup.write_line.empty() ? "(no line)" : setup.write_line.c_str());
  std::printf(
      "\nEvery run: the pull issued before the kill completed through the client's reconnect "
      "and resend with the value from before the kill, and the restarted shard reported the "
      "checkpoint's clock.\n");
  return Status::Ok();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  CLI::App app{"Recovery of one shard, SIGKILL to serving again, with real processes"};
  ps::Config cfg;
  cfg.drop_caches = ::geteuid() == 0;
  bool quick = false;
  app.add_flag("--quick", quick,
               "Smoke test: 100,000 rows, 1 run, no cache dropping (unless given)");
  app.add_option("--rows", cfg.rows, "Rows of the table")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34));
  app.add_option("--dim", cfg.dim, "Floats per row")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--runs", cfg.runs, "Kill-and-restart runs (the median is reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--dir", cfg.dir,
                 "Folder to make the benchmark's own folder in (job YAML, checkpoints; removed "
                 "at the end)");
  app.add_option("--bin-dir", cfg.bin_dir,
                 "Folder holding ps_server (default: the folder of this executable)");
  app.add_flag("--drop-caches,!--no-drop-caches", cfg.drop_caches,
               "Drop the page cache before each restart and each plain read (needs root; "
               "default on when running as root)");
  app.add_flag("--huge-pages,!--no-huge-pages", cfg.huge_pages,
               "server.huge_pages of the job (default on): the store's blocks on 2 MiB pages");
  app.add_option("--reconnect-ms", cfg.reconnect_ms,
                 "liveness.reconnect_ms of the job: how often the worker and the control client "
                 "try the killed server's address again")
      ->check(CLI::Range(1u, 60000u));
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    if (app.count("--rows") == 0) cfg.rows = 100000;
    if (app.count("--runs") == 0) cfg.runs = 1;
    if (app.count("--drop-caches") == 0 && app.count("--no-drop-caches") == 0) {
      cfg.drop_caches = false;
    }
  }
  if (cfg.drop_caches && ::geteuid() != 0) {
    std::fprintf(stderr,
                 "recovery_bench: --drop-caches needs root; run as root or pass "
                 "--no-drop-caches\n");
    return 2;
  }
  ps::InitLogging("recovery_bench", "info").IgnoreError();
  ps::Status s = ps::RunAll(cfg);
  if (!s.ok()) {
    std::fprintf(stderr, "recovery_bench: FAILED: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
