// A worker for the replication fault test (replicated_kills_test.cc),
// started by ps_launch in place of ps_worker:
//
//   replica_pusher --stop-file F --config job.yaml --rank R [--log-level L]
//
// Rank r adds r + 1 to every row of table 0 (optimizer add) once per
// clock, and, when table 1 is a hashed table (add), to each of 5000 ids of
// it (under consistency.aggregate the mean of the ranks' pushes is
// applied), from the clock it joins at (0, or a restored checkpoint's). It
// reports its clock every 100 clocks ("clock N"); once F holds a clock T
// it stops at T, pulls the table and the ids (under bsp: after every
// worker's T pushes) and checks that each holds exactly sum over ranks of
// (r + 1) x T (divided by the workers under aggregate): a push lost or
// applied twice, or a restore that lost or doubled one, shows as a wrong
// row. Exit 0 when exact, 1 otherwise (naming the first wrong row or id),
// 2 on bad flags. Also the workers of e2e_test's resume onto another
// number of servers. With --pull-each-clock it first pulls the table and
// the ids every clock, under bsp, and checks that they hold at least the
// sum of every clock before it and at most that of this clock too (the
// values a training step reads), so pulls that a reshard moved are checked
// too.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "common/config.h"

namespace {

// The clock written in `path`; -1 while it is absent or empty.
int64_t StopClock(const std::string& path) {
  std::ifstream in(path);
  int64_t clock = -1;
  if (in) in >> clock;
  return in ? clock : -1;
}

int Fail(const ps::Status& s) {
  std::fprintf(stderr, "replica_pusher: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, stop_file;
  uint32_t rank = 0;
  bool have_rank = false, pull_each_clock = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--pull-each-clock") {
      pull_each_clock = true;
      continue;
    }
    if (i + 1 >= argc) break;
    const std::string flag = argv[i], value = argv[++i];
    if (flag == "--config") config = value;
    else if (flag == "--stop-file") stop_file = value;
    else if (flag == "--rank") rank = static_cast<uint32_t>(std::stoul(value)), have_rank = true;
    // --log-level and the like: ignored.
  }
  if (config.empty() || stop_file.empty() || !have_rank) {
    std::fprintf(stderr, "usage: replica_pusher --stop-file F --config job.yaml --rank R\n");
    return 2;
  }
  auto job = ps::LoadJobFile(config);
  if (!job.ok()) return Fail(job.status());
  auto client = ps::Client::Create(*job, rank);
  if (!client.ok()) return Fail(client.status());
  if (ps::Status s = (*client)->Join(); !s.ok()) return Fail(s);
  const uint64_t rows = job->tables[0].rows;
  // Table 1, when hashed: the same pushes to kIds ids spread over the
  // uint64 space (rows made by the first push, copied by id to a replica
  // that rejoins).
  const bool hashed = job->tables.size() > 1 && job->tables[1].hashed();
  constexpr uint64_t kIds = 5000;
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; hashed && i < kIds; ++i) ids.push_back(i * 0x9e3779b97f4a7c15ull + 7);
  constexpr int64_t kMaxClocks = 1000000;
  int64_t stop = -1;
  // A job resumed from a checkpoint starts at its clock: the rows hold
  // every push of the clocks before it.
  int64_t clock = (*client)->clock();
  double per_clock = 0;
  for (uint32_t r = 0; r < job->cluster.workers; ++r) per_clock += r + 1;
  // consistency.aggregate applies the mean of a clock's pushes.
  if (job->consistency.aggregate) per_clock /= job->cluster.workers;
  std::vector<float> read(rows + ids.size());
  for (; clock < kMaxClocks && (stop < 0 || clock < stop); ++clock) {
    if (pull_each_clock) {
      // What a training step reads: every push of the clocks before this one.
      auto pulled = (*client)->PullDense(0, read.data());
      if (!pulled.ok()) return Fail(pulled.status());
      if (ps::Status s = (*client)->Wait(*pulled); !s.ok()) return Fail(s);
      if (hashed) {
        if (ps::Status s = (*client)->PullSync(1, ids, read.data() + rows); !s.ok()) return Fail(s);
      }
      // bsp: at least every push of the clocks before this one, and at
      // most those of this clock too (a faster worker's may be in).
      const auto low = static_cast<float>(per_clock * static_cast<double>(clock));
      const auto high = static_cast<float>(per_clock * static_cast<double>(clock + 1));
      for (uint64_t row = 0; row < read.size(); ++row) {
        if (read[row] < low || read[row] > high) {
          std::printf("at clock %lld %s %llu reads %.1f, expected %.1f to %.1f\n",
                      static_cast<long long>(clock), row < rows ? "row" : "hashed id",
                      static_cast<unsigned long long>(row < rows ? row : ids[row - rows]),
                      read[row], low, high);
          return 1;
        }
      }
    }
    std::vector<float> update(rows, static_cast<float>(rank + 1));
    auto push = (*client)->PushDense(0, ps::SharedFloats::Take(std::move(update)));
    if (!push.ok()) return Fail(push.status());
    std::optional<ps::Ticket> by_id;
    if (hashed) {
      auto pushed = (*client)->Push(
          1, ids, ps::SharedFloats::Take(std::vector<float>(ids.size(), static_cast<float>(rank + 1))));
      if (!pushed.ok()) return Fail(pushed.status());
      by_id = *pushed;
    }
    // The clock before the pushes' acknowledgements: under replication
    // after aggregation they come once the clock's sums are replicated.
    auto ticket = (*client)->Clock();
    if (!ticket.ok()) return Fail(ticket.status());
    if (ps::Status s = (*client)->Wait(*push); !s.ok()) return Fail(s);
    if (by_id.has_value()) {
      if (ps::Status s = (*client)->Wait(*by_id); !s.ok()) return Fail(s);
    }
    if (ps::Status s = (*client)->Wait(*ticket); !s.ok()) return Fail(s);
    if ((clock + 1) % 100 == 0) std::printf("clock %lld\n", static_cast<long long>(clock + 1));
    std::fflush(stdout);
    if (stop < 0 && clock % 10 == 0) stop = StopClock(stop_file);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<float> pulled(rows + ids.size());
  auto pull = (*client)->PullDense(0, pulled.data());
  if (!pull.ok()) return Fail(pull.status());
  if (ps::Status s = (*client)->Wait(*pull); !s.ok()) return Fail(s);
  if (hashed) {  // the ids' values follow the rows, checked alike
    if (ps::Status s = (*client)->PullSync(1, ids, pulled.data() + rows); !s.ok()) return Fail(s);
  }
  const float expected = static_cast<float>(per_clock * static_cast<double>(clock));
  for (uint64_t row = 0; row < pulled.size(); ++row) {
    if (pulled[row] != expected) {
      std::printf("%s %llu holds %.1f after %lld clocks, expected %.1f: %s\n",
                  row < rows ? "row" : "hashed id",
                  static_cast<unsigned long long>(row < rows ? row : ids[row - rows]), pulled[row],
                  static_cast<long long>(clock), expected,
                  pulled[row] < expected ? "acknowledged pushes were lost"
                                         : "pushes were applied twice");
      return 1;
    }
  }
  std::printf("exact: every one of %llu rows and %llu hashed ids holds %.1f after %lld clocks\n",
              static_cast<unsigned long long>(rows), static_cast<unsigned long long>(ids.size()),
              expected, static_cast<long long>(clock));
  std::fflush(stdout);
  if (ps::Status s = (*client)->Leave(); !s.ok()) return Fail(s);
  return 0;
}
