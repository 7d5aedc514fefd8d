#include "worker/train_options.h"

#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/text.h"
#include "worker/program_specs.h"

namespace ps {
namespace {

// train.command: a non-empty list of strings, the first not empty; not
// with train.program (the workers run one or the other).
Status ReadCommand(const YamlReader& r, const YamlMap& map, const YamlValue* value,
                   TrainOptions* train) {
  if (value == nullptr) return Status::Ok();
  constexpr std::string_view kExpected =
      "a list of strings: the worker's program and its arguments, e.g. [python3, train.py]";
  PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items, r.ReadList(*value, kExpected));
  if (items.empty()) {
    return r.WithPosition(InvalidOption(r.source(), "train.command", "got an empty list",
                                        std::string(kExpected)));
  }
  train->command.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    PS_RETURN_IF_ERROR(r.ReadString(items[i], kExpected, &train->command[i]));
  }
  if (train->command[0].empty()) {
    return r.WithPosition(InvalidOption(r.source(), "train.command[0]", "got an empty string",
                                        "the worker's program (a path, or a name on PATH)"));
  }
  if (map.Find("program") != nullptr) {
    return r.WithPosition(InvalidOption(
        r.source(), "train.command",
        "given with train.program " + train->program,
        "one of them: train.program runs a built-in program in ps_worker, train.command runs "
        "the workers' own"));
  }
  return Status::Ok();
}

Status ReadTrainSection(const YamlReader& r, const YamlValue& value, TrainOptions* train) {
  using T = TrainOptions;
  // features, layers and ctr are the programs' own keys: allowed with every
  // program, and read (required, checked or left alone) by the program's
  // row (ProgramSpec::read_keys) at the place of the first of them, once
  // the program is known.
  const auto read_program_keys = [](const YamlReader& reader, const YamlMap& map,
                                    const YamlValue*, T* t) {
    if (!t->command.empty()) {
      // The workers' own program: no built-in program reads these.
      for (const std::string_view key : {"features", "layers", "ctr"}) {
        if (map.Find(key) == nullptr) continue;
        return reader.WithPosition(InvalidOption(
            reader.source(), "train." + std::string(key), "given with train.command",
            "no train." + std::string(key) + ": it belongs to a built-in train.program, and "
            "train.command runs the workers' own program"));
      }
      return Status::Ok();
    }
    const ProgramSpec* program = FindProgramSpec(t->program);
    return program->read_keys == nullptr ? Status::Ok() : program->read_keys(reader, map, t);
  };
  const auto read_with_features = [](const YamlReader&, const YamlMap&, const YamlValue*, T*) {
    return Status::Ok();  // read by read_program_keys
  };
  const std::vector<YamlField<T>> fields = {
      {"program",
       [](const YamlReader& reader, const YamlValue& v, T* t) {
         PS_ASSIGN_OR_RETURN(size_t index, reader.ReadName(v, ProgramNames()));
         t->program = ProgramSpecs()[index].name;
         return Status::Ok();
       }},
      // Before the programs' keys, which a command's job has none of.
      {"command", {}, {}, ReadCommand},
      StringField("table", &T::table, "a table name"),
      StringField("user_table", &T::user_table, "a table name"),
      StringField("item_table", &T::item_table, "a table name"),
      {"features", {}, {}, read_program_keys},
      {"layers", {}, {}, read_with_features},
      {"ctr", {}, {}, read_with_features},
      UnsignedField("eval_every", &T::eval_every),
      StringField("data_dir", &T::data_dir, "a folder"),
      UnsignedField("samples_per_worker", &T::samples_per_worker),
      UnsignedField("test_samples", &T::test_samples),
      DoubleField("observe_probability", &T::observe_probability),
      DoubleField("test_fraction", &T::test_fraction),
      UnsignedField("batch_size", &T::batch_size),
      UnsignedField("iterations", &T::iterations),
      FloatField("noise", &T::noise),
      UnsignedField("seed", &T::seed),
      UnsignedField("log_every", &T::log_every),
      StringField("metrics_csv", &T::metrics_csv, "a file path"),
  };
  // A train section is what makes a job a training job.
  train->program = std::string(kDefaultTrainProgram);
  return ReadSection(r, value, fields, "a map with the training program's settings", train);
}

// The common loader `load` with the train section read into a TrainJob and
// checked (ValidateTrain).
template <typename Load>
StatusOr<TrainJob> LoadTrainJob(Load load) {
  TrainJob job;
  const JobSection train[] = {
      {.key = "train",
       .read = [&job](const YamlReader& r,
                      const YamlValue& value) { return ReadTrainSection(r, value, &job.train); },
       // Inside the loader, so that a refused value is named with its line.
       .check = [&job](const JobOptions& read) {
         return ValidateTrain(TrainJob{read, job.train});
       }}};
  PS_ASSIGN_OR_RETURN(static_cast<JobOptions&>(job), load(train));
  return job;
}

}  // namespace

StatusOr<TrainJob> LoadTrainJobFile(const std::string& path) {
  return LoadTrainJob(
      [&](std::span<const JobSection> sections) { return LoadJobFile(path, sections); });
}

StatusOr<TrainJob> LoadTrainJobString(const std::string& yaml_text, const std::string& source) {
  return LoadTrainJob([&](std::span<const JobSection> sections) {
    return LoadJobString(yaml_text, source, sections);
  });
}

Status ValidateTrain(const TrainJob& job) {
  const TrainOptions& train = job.train;
  if (train.program.empty()) return Status::Ok();  // not a training job
  if (!train.command.empty()) {
    if (job.cluster.evaluator) {
      return InvalidOption(job.source, "cluster.evaluator",
                           "got true with train.command (the workers run their own program)",
                           "false: the evaluator runs a built-in train.program");
    }
    return Status::Ok();  // the workers' own program reads what it needs
  }
  const ProgramSpec* program = FindProgramSpec(train.program);
  if (program == nullptr) {
    return TrainOptionError(job, "program", "got " + Quote(train.program),
                            "one of " + JoinNames(ProgramNames()));
  }
  if (train.batch_size < 1) {
    return TrainOptionError(job, "batch_size", "got 0", "a minibatch size >= 1");
  }
  if (train.iterations < 1) {
    return TrainOptionError(job, "iterations", "got " + std::to_string(train.iterations), ">= 1");
  }
  if (!std::isfinite(train.noise) || train.noise < 0.0f) {
    return TrainOptionError(job, "noise", "got " + FloatText(train.noise), "a finite stddev >= 0");
  }
  if (job.cluster.evaluator && !program->evaluates) {
    return InvalidOption(job.source, "cluster.evaluator",
                         "got true, but train.program " + train.program +
                             " has no held-out data to evaluate on",
                         "false for this program (mlp, sparse_logistic_regression and "
                         "matrix_factorization have an evaluator)");
  }
  return program->check(job);
}

Status TrainOptionError(const TrainJob& job, std::string_view key, std::string_view problem,
                        std::string_view expected) {
  return InvalidOption(job.source, "train." + std::string(key), problem, expected);
}

StatusOr<const TableOptions*> TrainTable(const TrainJob& job, std::string_view key,
                                         const std::string& name) {
  StatusOr<uint32_t> id = job.TableId(name);
  if (!id.ok()) {
    std::vector<std::string_view> names;
    for (const TableOptions& table : job.tables) names.push_back(table.name);
    return TrainOptionError(job, key, "no table named " + Quote(name),
                            "the name of one of the job's tables (" + JoinNames(names) + ")");
  }
  return &job.tables[*id];
}

StatusOr<const TableOptions*> WeightTable(const TrainJob& job) {
  PS_ASSIGN_OR_RETURN(const TableOptions* table, TrainTable(job, "table", job.train.table));
  if (table->dim != 1) {
    return TrainOptionError(
        job, "table", "table " + Quote(table->name) + " has dim " + std::to_string(table->dim),
        "a table with dim 1 (one weight per feature)");
  }
  return table;
}

Status CheckSamplesPerWorker(const TrainJob& job) {
  const TrainOptions& train = job.train;
  if (train.samples_per_worker < 1) {
    return TrainOptionError(job, "samples_per_worker",
                            "got " + std::to_string(train.samples_per_worker), ">= 1");
  }
  if (train.batch_size < 1 || train.batch_size > train.samples_per_worker) {
    return TrainOptionError(job, "batch_size", "got " + std::to_string(train.batch_size),
                            "1 <= batch_size <= samples_per_worker (" +
                                std::to_string(train.samples_per_worker) + ")");
  }
  return Status::Ok();
}

Status ReadFeaturesIfPresent(const YamlReader& reader, const YamlMap& section,
                             TrainOptions* train) {
  const YamlValue* value = section.Find("features");
  return value == nullptr ? Status::Ok() : reader.ReadUnsigned(*value, &train->features);
}

std::string NoTrainSectionMessage(const std::string& path) {
  return path +
         ": the job has no train section, so ps_worker has nothing to run. A file without one "
         "describes tables only: start its servers (ps_server --config " + path +
         " --shard N) and drive them with a client of your own (client/client.h), or add a "
         "train section to train one of the built-in programs (config/README.md, section train)";
}

}  // namespace ps
