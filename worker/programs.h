// The training programs of ps_worker, one row each in one table
// (programs.cc); train.program names a row. A row says how the program
// reads its own keys of the train section, what it checks beyond the
// limits every program shares (worker/train_options.h), whether it needs
// the servers, and how it runs. A new program is one file (its reads,
// checks and training step, e.g. worker/mlp_training.cc, whose steps
// worker/training_loop.h runs) and one row.
//
// Thread-safe: the table is constant.
#ifndef PS_WORKER_PROGRAMS_H_
#define PS_WORKER_PROGRAMS_H_

#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/yaml_reader.h"
#include "worker/evaluation.h"
#include "worker/train_options.h"
#include "worker/training.h"

namespace ps {

struct TrainProgram {
  // The value of train.program.
  std::string_view name;
  // Reads the program's own keys of the train section (features, layers):
  // which it requires, which it reads and which it leaves alone; `section`
  // is the train map. Null: it reads none of them.
  Status (*read_keys)(const YamlReader& reader, const YamlMap& section,
                      TrainOptions* train) = nullptr;
  // The program's checks (its tables, layers, features), run by
  // ValidateTrain after the limits every program shares; InvalidArgument
  // as there.
  Status (*check)(const TrainJob& job) = nullptr;
  // Trains on worker context.rank to the end and returns ps_worker's exit
  // code: 0 when training succeeded by the program's own measure, 1 when
  // it failed or did not succeed (logged, saying what to change).
  // REQUIRES: ValidateTrain(*context.job).ok(); context.client when
  // needs_servers.
  int (*run)(const ProgramContext& context) = nullptr;
  // It drives context.client itself, so it cannot run with --standalone.
  bool needs_servers = false;
  // Its measure on held-out data, for the evaluator process
  // (cluster.evaluator, worker/evaluator.h). Null: it has none.
  MakeEvaluation evaluation = nullptr;
};

// Every program, in the order messages list them.
std::span<const TrainProgram> TrainPrograms();

// The programs' names, in that order.
std::vector<std::string_view> TrainProgramNames();

// The program called `name`, or null.
const TrainProgram* FindTrainProgram(std::string_view name);

}  // namespace ps

#endif  // PS_WORKER_PROGRAMS_H_
