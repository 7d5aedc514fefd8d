// push_latency: the latency of one worker's dense pushes (and pulls, with
// --ops) against a running job's servers, wherever they run.
// transport_bench measures shards on threads of its own process on
// loopback; this is a worker of a real job, for servers and backups on
// other hosts (benchmarks/replication_link_bench.py starts them on hosts
// made of network namespaces with rate-limited links), or for the C++ side
// of benchmarks/python_price_bench.py, beside a Python worker of the same
// job.
//
//   push_latency --config job.yaml [--rank R] [--tables T ...] [--ops push,pull]
//                [--seconds S] [--warmup N] [--stdin]
//
// Workload: the worker joins; then, for each table T in turn and each op
// of --ops in turn (push by default), it pushes the whole table (dense,
// every value 1e-6, so an optimizer add keeps the values finite) or pulls
// the whole table into one buffer, with one request in flight: each is
// sent, then waited for until its acknowledgement (a push under
// replication.factor k: once every backup has it) or its values, for S
// seconds after N not counted. Then it leaves, so the servers exit (unless
// server.exit_when_workers_leave is false or other workers are still in
// the job). With --stdin the requests to time come from standard input
// instead, a line "TABLE push|pull SECONDS" each, each answered by its
// output line at once (a caller alternating with other clients on the same
// servers), until the end of the input.
//
// Output, a line per table and op:
//   "table T pushes N bytes B p50_us X p90_us Y p99_us Z mb_s M"
//   "table T pulls N bytes B p50_us X p90_us Y p99_us Z mb_s M",
// M the value bytes acknowledged (pulled) per second of the timed requests.
// Exit 0 when every request succeeded, 1 on an error (printed), 2 on bad
// flags. Under bsp or ssp each push is followed by a clock; the job file
// should have this one worker (cluster.workers 1) or run under asp.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "benchmarks/machine.h"
#include "client/client.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/transport.h"

namespace {

int Fail(const ps::Status& s) {
  std::fprintf(stderr, "push_latency: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ps::KeepMessageMemory();
  CLI::App app{"Latency of one worker's dense pushes against a running job's servers"};
  std::string config;
  uint32_t rank = 0;
  std::vector<uint32_t> tables = {0};
  std::vector<std::string> ops = {"push"};
  double seconds = 3.0;
  int warmup = 20;
  app.add_option("--config", config, "The job file (its servers must be running)")->required();
  app.add_option("--rank", rank, "This worker's rank");
  app.add_option("--tables", tables, "The tables pushed, each whole in every push, in turn");
  app.add_option("--ops", ops, "push, pull or both, in turn for each table")
      ->delimiter(',')
      ->check(CLI::IsMember({"push", "pull"}));
  app.add_option("--seconds", seconds, "How long to time pushes")->check(CLI::Range(0.01, 600.0));
  app.add_option("--warmup", warmup, "Requests first, not timed")->check(CLI::Range(0, 100000));
  bool from_stdin = false;
  app.add_flag("--stdin", from_stdin,
               "Read \"TABLE push|pull SECONDS\" lines from stdin instead, a result line each");
  CLI11_PARSE(app, argc, argv);

  if (ps::Status log = ps::InitLogging("push_latency", "warn"); !log.ok()) return Fail(log);
  auto job = ps::LoadJobFile(config);
  if (!job.ok()) return Fail(job.status());
  for (const uint32_t table : tables) {
    if (table >= job->tables.size()) {
      std::fprintf(stderr, "push_latency: --tables %u: %s has %zu tables\n", table,
                   config.c_str(), job->tables.size());
      return 2;
    }
  }
  auto client = ps::Client::Create(*job, rank);
  if (!client.ok()) return Fail(client.status());
  if (ps::Status s = (*client)->Join(); !s.ok()) return Fail(s);
  const bool clocked = job->consistency.mode != ps::ConsistencyMode::kAsp;

  // One push, sent and then waited for; its latency in microseconds.
  auto push_once = [&](uint32_t table, const ps::SharedFloats& values) -> ps::StatusOr<double> {
    const auto t0 = std::chrono::steady_clock::now();
    PS_ASSIGN_OR_RETURN(ps::Ticket push, (*client)->PushDense(table, values));
    if (clocked) {
      // The clock first: under replication after aggregation a push is
      // acknowledged once its clock's sums are on the backups.
      PS_ASSIGN_OR_RETURN(ps::Ticket ticket, (*client)->Clock());
      PS_RETURN_IF_ERROR((*client)->Wait(push));
      PS_RETURN_IF_ERROR((*client)->Wait(ticket));
    } else {
      PS_RETURN_IF_ERROR((*client)->Wait(push));
    }
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
        .count();
  };
  // One pull of the whole table into `out`, sent and then waited for.
  auto pull_once = [&](uint32_t table, float* out) -> ps::StatusOr<double> {
    const auto t0 = std::chrono::steady_clock::now();
    PS_ASSIGN_OR_RETURN(ps::Ticket pull, (*client)->PullDense(table, out));
    PS_RETURN_IF_ERROR((*client)->Wait(pull));
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
        .count();
  };
  // Times `op` ("push" or "pull") of the whole table `table` for
  // `timed_seconds` after `warmup` requests, and prints its line.
  auto measure = [&](uint32_t table, bool push, double timed_seconds) -> ps::Status {
    const uint64_t floats = job->tables[table].rows * job->tables[table].dim;
    const ps::SharedFloats values = ps::SharedFloats::Take(std::vector<float>(floats, 1e-6f));
    std::vector<float> pulled(floats);
    auto once = [&]() { return push ? push_once(table, values) : pull_once(table, pulled.data()); };
    for (int i = 0; i < warmup; ++i) PS_RETURN_IF_ERROR(once().status());
    std::vector<double> latencies_us;
    const auto timed_from = std::chrono::steady_clock::now();
    const auto until = timed_from + std::chrono::duration<double>(timed_seconds);
    // Bounded by the time, and by a count should requests return at once.
    constexpr size_t kMaxRequests = 10000000;
    while (latencies_us.size() < kMaxRequests && std::chrono::steady_clock::now() < until) {
      PS_ASSIGN_OR_RETURN(const double us, once());
      latencies_us.push_back(us);
    }
    const double timed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_from).count();
    const uint64_t bytes = floats * sizeof(float);
    const size_t n = latencies_us.size();
    const double mb_s = timed_s > 0 ? static_cast<double>(n * bytes) / timed_s / 1e6 : 0;
    const double p50 = ps::Percentile(latencies_us, 0.5);
    const double p90 = ps::Percentile(latencies_us, 0.9);
    const double p99 = ps::Percentile(latencies_us, 0.99);
    std::printf("table %u %s %zu bytes %" PRIu64 " p50_us %.1f p90_us %.1f p99_us %.1f mb_s %.1f\n",
                table, push ? "pushes" : "pulls", n, bytes, p50, p90, p99, mb_s);
    std::fflush(stdout);
    return ps::Status::Ok();
  };
  if (from_stdin) {
    // "TABLE push|pull SECONDS" a line, each answered by its result line.
    for (std::string line; std::getline(std::cin, line);) {
      std::istringstream words(line);
      uint32_t table = 0;
      std::string op;
      double timed_seconds = 0;
      if (!(words >> table >> op >> timed_seconds) || table >= job->tables.size() ||
          (op != "push" && op != "pull") || !(timed_seconds > 0 && timed_seconds <= 600)) {
        std::fprintf(stderr,
                     "push_latency: stdin: expected \"TABLE push|pull SECONDS\" (a table "
                     "of %zu, 0 < SECONDS <= 600), got \"%s\"\n",
                     job->tables.size(), line.c_str());
        return 2;
      }
      if (ps::Status s = measure(table, op == "push", timed_seconds); !s.ok()) return Fail(s);
    }
  } else {
    for (const uint32_t table : tables) {
      for (const std::string& op : ops) {
        if (ps::Status s = measure(table, op == "push", seconds); !s.ok()) return Fail(s);
      }
    }
  }
  if (ps::Status s = (*client)->Leave(); !s.ok()) return Fail(s);
  return 0;
}
