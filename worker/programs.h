// How the training programs of ps_worker run, one row each (programs.cc);
// train.program names a row. What each reads and checks in the job file is
// its row of worker/program_specs.h, by the same name and in the same
// order. A new program is one file (its training step, e.g.
// worker/mlp_training.cc, whose steps worker/training_loop.h runs), its
// row here, and its keys and checks in program_specs.cc.
//
// Thread-safe: the table is constant.
#ifndef PS_WORKER_PROGRAMS_H_
#define PS_WORKER_PROGRAMS_H_

#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "worker/evaluation.h"
#include "worker/program_specs.h"
#include "worker/train_options.h"
#include "worker/training.h"

namespace ps {

struct TrainProgram {
  // The value of train.program (its ProgramSpec's name).
  std::string_view name;
  // Trains on worker context.rank to the end and returns ps_worker's exit
  // code: 0 when training succeeded by the program's own measure, 1 when
  // it failed or did not succeed (logged, saying what to change).
  // REQUIRES: ValidateTrain(*context.job).ok(); context.client when its
  // ProgramSpec needs_servers.
  int (*run)(const ProgramContext& context) = nullptr;
  // Its measure on held-out data, for the evaluator process
  // (cluster.evaluator, worker/evaluator.h). Null: it has none (and its
  // ProgramSpec says so).
  MakeEvaluation evaluation = nullptr;
};

// Every program, in the order of ProgramSpecs().
std::span<const TrainProgram> TrainPrograms();

// The program called `name`, or null.
const TrainProgram* FindTrainProgram(std::string_view name);

}  // namespace ps

#endif  // PS_WORKER_PROGRAMS_H_
