// The checks of the train section, part of JobOptions::Validate().
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/options.h"
#include "common/options_internal.h"
#include "common/text.h"

namespace ps {
namespace {

// The table `name` that train.<key> names, or InvalidArgument listing the job's tables.
StatusOr<const TableOptions*> TrainTable(const std::string& source, const JobOptions& job,
                                         const char* key, const std::string& name) {
  StatusOr<uint32_t> id = job.TableId(name);
  if (!id.ok()) {
    std::string names;
    for (const TableOptions& table : job.tables) {
      if (!names.empty()) names.append(", ");
      names.append(table.name);
    }
    return InvalidOption(source, std::string("train.") + key, "no table named " + Quote(name),
                   "the name of one of the job's tables (" + names + ")");
  }
  return &job.tables[*id];
}

Status ValidateMatrixFactorization(const std::string& source, const JobOptions& job) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(const TableOptions* users,
                      TrainTable(source, job, "user_table", train.user_table));
  PS_ASSIGN_OR_RETURN(const TableOptions* items,
                      TrainTable(source, job, "item_table", train.item_table));
  if (users == items) {
    return InvalidOption(source, "train.item_table", "the same table as train.user_table",
                   "two different tables for user and item factors");
  }
  if (users->dim != items->dim) {
    return InvalidOption(source, "train.item_table",
                   "table " + Quote(items->name) + " has dim " + std::to_string(items->dim) +
                       " but user table " + Quote(users->name) + " has dim " +
                       std::to_string(users->dim),
                   "the same dim (the factorization's rank) for both tables");
  }
  if (users->rows < job.cluster.workers) {
    return InvalidOption(source, "train.user_table",
                   "table " + Quote(users->name) + " has " + std::to_string(users->rows) +
                       " rows for " + std::to_string(job.cluster.workers) + " workers",
                   "at least one user per worker");
  }
  if (!(train.observe_probability > 0.0 && train.observe_probability <= 1.0)) {
    return InvalidOption(source, "train.observe_probability",
                   "got " + DoubleText(train.observe_probability),
                   "a probability in (0, 1]");
  }
  if (!(train.test_fraction >= 0.0 && train.test_fraction < 1.0)) {
    return InvalidOption(source, "train.test_fraction",
                   "got " + DoubleText(train.test_fraction),
                   "a fraction in [0, 1)");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTrain(const std::string& source, const JobOptions& job) {
  const TrainOptions& train = job.train;
  if (train.program == TrainProgram::kNone) return Status::Ok();  // not a training job
  if (train.batch_size < 1) {
    return InvalidOption(source, "train.batch_size", "got 0", "a minibatch size >= 1");
  }
  if (train.iterations < 1) {
    return InvalidOption(source, "train.iterations",
                   "got " + std::to_string(train.iterations), ">= 1");
  }
  if (!std::isfinite(train.noise) || train.noise < 0.0f) {
    return InvalidOption(source, "train.noise", "got " + FloatText(train.noise),
                   "a finite stddev >= 0");
  }
  if (train.program == TrainProgram::kMatrixFactorization) {
    return ValidateMatrixFactorization(source, job);
  }

  PS_ASSIGN_OR_RETURN(const TableOptions* table_options,
                      TrainTable(source, job, "table", train.table));
  const TableOptions& table = *table_options;
  if (table.dim != 1) {
    return InvalidOption(
        source, "train.table",
        "table " + Quote(table.name) + " has dim " + std::to_string(table.dim),
        "a table with dim 1 (one weight per feature)");
  }
  if (train.program == TrainProgram::kMlp) {
    if (train.layers.size() < 2 || train.layers.front() != 784 || train.layers.back() != 10 ||
        std::find(train.layers.begin(), train.layers.end(), 0u) != train.layers.end()) {
      return InvalidOption(source, "train.layers", "got " + std::to_string(train.layers.size()) + " sizes",
                     "layer sizes from 784 (Fashion-MNIST pixels) to 10 (classes), each >= 1, "
                     "e.g. [784, 100, 10]");
    }
    uint64_t params = 0;
    for (size_t l = 1; l < train.layers.size(); ++l) {
      params += uint64_t{train.layers[l - 1]} * train.layers[l] + train.layers[l];
    }
    if (params != table.rows) {
      return InvalidOption(source, "train.table",
                     "table " + Quote(table.name) + " has " + std::to_string(table.rows) +
                         " rows but the MLP has " + std::to_string(params) + " parameters",
                     "rows equal to the parameter count (" + std::to_string(params) + ")");
    }
  } else if (train.program == TrainProgram::kSparseLogisticRegression) {
    if (train.features != 0 && train.features != table.rows) {
      return InvalidOption(source, "train.features",
                     "got " + std::to_string(train.features) + " but table " +
                         Quote(table.name) + " has " + std::to_string(table.rows) + " rows",
                     "features equal to the rows of train.table (or omit it)");
    }
    // A sample holds up to 50 distinct features, at most half of them all.
    if (table.rows < 100) {
      return InvalidOption(source, "train.table",
                     "table " + Quote(table.name) + " has " + std::to_string(table.rows) +
                         " rows",
                     "at least 100 features (rows) for the click-like data");
    }
    if (train.test_samples < 1) {
      return InvalidOption(source, "train.test_samples", "got 0", "held-out samples >= 1");
    }
  } else if (train.features != table.rows) {
    return InvalidOption(source, "train.features",
                   "got " + std::to_string(train.features) + " but table " +
                       Quote(table.name) + " has " +
                       std::to_string(table.rows) + " rows",
                   "features equal to the rows of train.table");
  }
  if (train.samples_per_worker < 1) {
    return InvalidOption(source, "train.samples_per_worker",
                   "got " + std::to_string(train.samples_per_worker), ">= 1");
  }
  if (train.batch_size < 1 || train.batch_size > train.samples_per_worker) {
    return InvalidOption(source, "train.batch_size",
                   "got " + std::to_string(train.batch_size),
                   "1 <= batch_size <= samples_per_worker (" +
                       std::to_string(train.samples_per_worker) + ")");
  }
  return Status::Ok();
}


}  // namespace ps
