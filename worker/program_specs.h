// What each training program of ps_worker reads and checks in a job
// file's train section, one row each (program_specs.cc): its own keys
// (features, layers), its checks beyond the limits every program shares
// (worker/train_options.h), whether it needs the servers and whether it
// has an evaluation for the evaluator process. train.program names a row.
//
// This is the part of a program the job file's loader needs, without its
// training code: ps_launch checks a job file with it and links no model,
// backend or data reader. How a program runs is its row in
// worker/programs.h, by the same name (programs_test checks that the two
// tables list the same programs in the same order).
//
// Thread-safe: the table is constant.
#ifndef PS_WORKER_PROGRAM_SPECS_H_
#define PS_WORKER_PROGRAM_SPECS_H_

#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/yaml_reader.h"
#include "worker/train_options.h"

namespace ps {

struct ProgramSpec {
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
  // It drives the client itself, so it cannot run with --standalone.
  bool needs_servers = false;
  // It has a measure on held-out data for the evaluator process
  // (cluster.evaluator; TrainProgram::evaluation).
  bool evaluates = false;
};

// Every program, in the order messages list them.
std::span<const ProgramSpec> ProgramSpecs();

// The programs' names, in that order.
std::vector<std::string_view> ProgramNames();

// The program called `name`, or null.
const ProgramSpec* FindProgramSpec(std::string_view name);

}  // namespace ps

#endif  // PS_WORKER_PROGRAM_SPECS_H_
