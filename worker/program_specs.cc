#include "worker/program_specs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/text.h"
#include "worker/data/ctr_data.h"
#include "worker/data/fashion_mnist.h"

namespace ps {
namespace {

// linear_regression. Reads train.features, required (>= 1). Checks:
// train.table has dim 1 and `features` rows, and batch_size fits
// samples_per_worker.

// What train.features holds for linear regression.
constexpr std::string_view kFeatures =
    "the number of features, >= 1 and equal to the rows of train.table "
    "(omit the train section for a job without training)";

Status ReadLinearRegressionKeys(const YamlReader& r, const YamlMap& section,
                                TrainOptions* train) {
  PS_ASSIGN_OR_RETURN(const YamlValue* value, r.Required(section, "features", kFeatures));
  return r.ReadUnsigned(*value, &train->features);
}

Status CheckLinearRegression(const TrainJob& job) {
  // First, as a job without training is most likely what 0 meant.
  if (job.train.features == 0) return TrainOptionError(job, "features", "got 0", kFeatures);
  PS_ASSIGN_OR_RETURN(const TableOptions* table, WeightTable(job));
  if (job.train.features != table->rows) {
    return TrainOptionError(job, "features",
                            "got " + std::to_string(job.train.features) + " but table " +
                                Quote(table->name) + " has " + std::to_string(table->rows) +
                                " rows",
                            "features equal to the rows of train.table");
  }
  if (!job.train.metrics_csv.empty()) {
    // Its progress is its log lines; a key it would ignore is refused.
    return TrainOptionError(job, "metrics_csv",
                            "linear_regression writes no metrics CSV (its progress is its log "
                            "lines: loss and steps/s)",
                            "no metrics_csv for this program (mlp, sparse_logistic_regression and "
                            "matrix_factorization write one)");
  }
  return CheckSamplesPerWorker(job);
}

// mlp. Reads train.layers, required. Checks: layers from 784 to 10, each
// >= 1; train.table has dim 1 and one row per parameter; batch_size fits
// the smallest worker's Fashion-MNIST samples.
Status ReadMlpKeys(const YamlReader& r, const YamlMap& section, TrainOptions* train) {
  constexpr std::string_view kLayers = "a list of layer sizes, e.g. [784, 100, 10]";
  PS_ASSIGN_OR_RETURN(const YamlValue* value, r.Required(section, "layers", kLayers));
  PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items, r.ReadList(*value, kLayers));
  train->layers.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    PS_RETURN_IF_ERROR(r.ReadUnsigned(items[i], &train->layers[i]));
  }
  return Status::Ok();
}

Status CheckMlp(const TrainJob& job) {
  PS_ASSIGN_OR_RETURN(const TableOptions* table, WeightTable(job));
  const std::vector<uint32_t>& layers = job.train.layers;
  if (layers.size() < 2 || layers.front() != 784 || layers.back() != 10 ||
      std::find(layers.begin(), layers.end(), 0u) != layers.end()) {
    return TrainOptionError(job, "layers", "got " + std::to_string(layers.size()) + " sizes",
                            "layer sizes from 784 (Fashion-MNIST pixels) to 10 (classes), each "
                            ">= 1, e.g. [784, 100, 10]");
  }
  uint64_t params = 0;
  for (size_t l = 1; l < layers.size(); ++l) {
    params += uint64_t{layers[l - 1]} * layers[l] + layers[l];
  }
  if (params != table->rows) {
    return TrainOptionError(job, "table",
                            "table " + Quote(table->name) + " has " +
                                std::to_string(table->rows) + " rows but the MLP has " +
                                std::to_string(params) + " parameters",
                            "rows equal to the parameter count (" + std::to_string(params) + ")");
  }
  // Every worker trains on its own block of the training split
  // (LoadFashionMnist); the smallest block must hold a minibatch.
  const uint64_t smallest = kFashionMnistTrainSamples / job.cluster.workers;
  if (job.train.batch_size < 1 || job.train.batch_size > smallest) {
    const std::string split = std::to_string(kFashionMnistTrainSamples) +
                              " Fashion-MNIST training samples split over " +
                              std::to_string(job.cluster.workers) + " workers";
    if (smallest == 0) {
      return InvalidOption(job.source, "cluster.workers",
                           "got " + std::to_string(job.cluster.workers) + ": " + split +
                               " leaves workers with no samples",
                           "at most " + std::to_string(kFashionMnistTrainSamples / std::max<uint32_t>(job.train.batch_size, 1)) +
                               " workers (a minibatch of train.batch_size each)");
    }
    return TrainOptionError(job, "batch_size", "got " + std::to_string(job.train.batch_size),
                            "1 <= batch_size <= " + std::to_string(smallest) +
                                ", the smallest worker's samples (" + split +
                                "); lower batch_size or cluster.workers");
  }
  return Status::Ok();
}

// sparse_logistic_regression (reads train.features when given): train.table
// has dim 1 and at least 100 rows, features is 0 or its rows,
// test_samples >= 1, batch_size fits samples_per_worker.
Status CheckSparseLogisticRegression(const TrainJob& job) {
  PS_ASSIGN_OR_RETURN(const TableOptions* table, WeightTable(job));
  const TrainOptions& train = job.train;
  if (train.features != 0 && train.features != table->rows) {
    return TrainOptionError(job, "features",
                            "got " + std::to_string(train.features) + " but table " +
                                Quote(table->name) + " has " + std::to_string(table->rows) +
                                " rows",
                            "features equal to the rows of train.table (or omit it)");
  }
  // A sample holds up to 50 distinct features, at most half of them all.
  if (table->rows < 100) {
    return TrainOptionError(job, "table",
                            "table " + Quote(table->name) + " has " +
                                std::to_string(table->rows) + " rows",
                            "at least 100 features (rows) for the click-like data");
  }
  if (train.test_samples < 1) {
    return TrainOptionError(job, "test_samples", "got 0", "held-out samples >= 1");
  }
  return CheckSamplesPerWorker(job);
}

// matrix_factorization (reads train.features when given, and nothing uses
// it): two different tables of one dim, at least one user per worker,
// observe_probability in (0, 1], test_fraction in [0, 1).
Status CheckMatrixFactorization(const TrainJob& job) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(const TableOptions* users, TrainTable(job, "user_table", train.user_table));
  PS_ASSIGN_OR_RETURN(const TableOptions* items, TrainTable(job, "item_table", train.item_table));
  if (users == items) {
    return TrainOptionError(job, "item_table", "the same table as train.user_table",
                            "two different tables for user and item factors");
  }
  if (users->dim != items->dim) {
    return TrainOptionError(job, "item_table",
                            "table " + Quote(items->name) + " has dim " +
                                std::to_string(items->dim) + " but user table " +
                                Quote(users->name) + " has dim " + std::to_string(users->dim),
                            "the same dim (the factorization's rank) for both tables");
  }
  if (users->rows < job.cluster.workers) {
    return TrainOptionError(job, "user_table",
                            "table " + Quote(users->name) + " has " + std::to_string(users->rows) +
                                " rows for " + std::to_string(job.cluster.workers) + " workers",
                            "at least one user per worker");
  }
  if (!(train.observe_probability > 0.0 && train.observe_probability <= 1.0)) {
    return TrainOptionError(job, "observe_probability",
                            "got " + DoubleText(train.observe_probability),
                            "a probability in (0, 1]");
  }
  if (!(train.test_fraction >= 0.0 && train.test_fraction < 1.0)) {
    return TrainOptionError(job, "test_fraction", "got " + DoubleText(train.test_fraction),
                            "a fraction in [0, 1)");
  }
  return Status::Ok();
}

// train.ctr.bags: a list of {field, max_values} maps, both keys required.
Status ReadCtrBags(const YamlReader& r, const YamlValue& value, CtrOptions* ctr) {
  constexpr std::string_view kBags =
      "a list of multi-valued fields, e.g. [{field: 3, max_values: 5}]";
  PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items, r.ReadList(value, kBags));
  using B = CtrBagField;
  const std::vector<YamlField<B>> keys = {
      UnsignedField("field", &B::field, "the field's index, from 0"),
      UnsignedField("max_values", &B::max_values, "the most values a sample holds in it"),
  };
  ctr->bags.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    PS_RETURN_IF_ERROR(ReadSection(r, items[i], keys, "", &ctr->bags[i]));
  }
  return Status::Ok();
}

// ctr. Reads train.ctr (optional: every key has a default). Checks:
// ctr.embedding_table is a hashed table, train.table a range table of dim 1
// with one row per MLP parameter, the generated data's shape (or both
// Criteo files), each bag field (a field of the data, named once, 1 to
// kCtrMaxBagValues values), test_samples >= 1 and batch_size within
// samples_per_worker.
Status ReadCtrKeys(const YamlReader& r, const YamlMap& section, TrainOptions* train) {
  const YamlValue* value = section.Find("ctr");
  if (value == nullptr) return Status::Ok();
  using C = CtrOptions;
  const auto read_list = [](auto member, std::string_view expected) {
    return [member, expected](const YamlReader& reader, const YamlValue& v, C* c) {
      // A single number stands for a list of one.
      std::vector<YamlValue> items;
      if (v.node->IsScalar()) {
        items.push_back(v);
      } else {
        PS_ASSIGN_OR_RETURN(items, reader.ReadList(v, expected));
      }
      auto& out = c->*member;
      out.resize(items.size());
      for (size_t i = 0; i < items.size(); ++i) {
        PS_RETURN_IF_ERROR(reader.ReadUnsigned(items[i], &out[i]));
      }
      return Status::Ok();
    };
  };
  const std::vector<YamlField<C>> fields = {
      StringField("embedding_table", &C::embedding_table, "a table name"),
      UnsignedField("fields", &C::fields),
      UnsignedField("dense", &C::dense),
      {"vocabulary", read_list(&C::vocabulary, "a count, or a list of one count per field")},
      DoubleField("zipf_exponent", &C::zipf_exponent),
      {"bags", ReadCtrBags},
      {"hidden", read_list(&C::hidden, "a list of hidden layer sizes, e.g. [64, 32]")},
      StringField("criteo_train", &C::criteo_train, "a file path"),
      StringField("criteo_test", &C::criteo_test, "a file path"),
  };
  return ReadSection(r, *value, fields, "", &train->ctr);
}

// The most fields of the generated data (each a block of the MLP's input).
constexpr uint32_t kMaxCtrFields = 1024;

Status CheckCtr(const TrainJob& job) {
  const TrainOptions& train = job.train;
  const CtrOptions& ctr = train.ctr;
  PS_ASSIGN_OR_RETURN(const TableOptions* embeddings,
                      TrainTable(job, "ctr.embedding_table", ctr.embedding_table));
  if (!embeddings->hashed()) {
    return TrainOptionError(job, "ctr.embedding_table",
                            "table " + Quote(embeddings->name) + " has keys: range",
                            "a table with keys: hashed (ids are any 64-bit value)");
  }
  const bool criteo = !ctr.criteo_train.empty() || !ctr.criteo_test.empty();
  if (criteo && (ctr.criteo_train.empty() || ctr.criteo_test.empty())) {
    return TrainOptionError(job, ctr.criteo_train.empty() ? "ctr.criteo_train" : "ctr.criteo_test",
                            "missing while the other Criteo file is given",
                            "both criteo_train and criteo_test, or neither (generated data)");
  }
  const uint32_t fields = criteo ? kCriteoFields : ctr.fields;
  const uint32_t dense = criteo ? kCriteoDense : ctr.dense;
  if (!criteo) {
    if (ctr.fields < 1 || ctr.fields > kMaxCtrFields) {
      return TrainOptionError(job, "ctr.fields", "got " + std::to_string(ctr.fields),
                              "1.." + std::to_string(kMaxCtrFields) + " categorical fields");
    }
    if (ctr.dense > kMaxCtrFields) {
      return TrainOptionError(job, "ctr.dense", "got " + std::to_string(ctr.dense),
                              "0.." + std::to_string(kMaxCtrFields) + " dense features");
    }
    if (ctr.vocabulary.size() != 1 && ctr.vocabulary.size() != ctr.fields) {
      return TrainOptionError(job, "ctr.vocabulary",
                              "got " + std::to_string(ctr.vocabulary.size()) + " counts for " +
                                  std::to_string(ctr.fields) + " fields",
                              "one count for every field, or one per field");
    }
    for (uint64_t v : ctr.vocabulary) {
      if (v < 1 || v > (uint64_t{1} << 40)) {
        return TrainOptionError(job, "ctr.vocabulary", "got " + std::to_string(v),
                                "values per field in 1..2^40");
      }
    }
    if (!(ctr.zipf_exponent > 0) || !std::isfinite(ctr.zipf_exponent)) {
      return TrainOptionError(job, "ctr.zipf_exponent", "got " + DoubleText(ctr.zipf_exponent),
                              "a finite exponent > 0 (1.1 is typical of click logs)");
    }
    PS_RETURN_IF_ERROR(CheckSamplesPerWorker(job));
  }
  for (size_t i = 0; i < ctr.bags.size(); ++i) {
    const CtrBagField& bag = ctr.bags[i];
    const std::string entry = "ctr.bags[" + std::to_string(i) + "]";
    if (bag.field >= fields) {
      return TrainOptionError(job, entry + ".field",
                              "got " + std::to_string(bag.field) + " for " +
                                  std::to_string(fields) +
                                  (criteo ? " fields (the Criteo columns C1..C26)" : " fields"),
                              "a field index 0.." + std::to_string(fields - 1));
    }
    for (size_t j = 0; j < i; ++j) {
      if (ctr.bags[j].field == bag.field) {
        return TrainOptionError(job, entry + ".field",
                                "got " + std::to_string(bag.field) + ", which ctr.bags[" +
                                    std::to_string(j) + "] names too",
                                "each field in at most one entry");
      }
    }
    if (bag.max_values < 1 || bag.max_values > kCtrMaxBagValues) {
      return TrainOptionError(job, entry + ".max_values", "got " + std::to_string(bag.max_values),
                              "the most values a sample holds in the field, 1.." +
                                  std::to_string(kCtrMaxBagValues));
    }
  }
  if (std::find(ctr.hidden.begin(), ctr.hidden.end(), 0u) != ctr.hidden.end()) {
    return TrainOptionError(job, "ctr.hidden", "a layer of size 0",
                            "hidden layer sizes >= 1, e.g. [64, 32]");
  }
  PS_ASSIGN_OR_RETURN(const TableOptions* mlp, WeightTable(job));
  if (mlp->hashed()) {
    return TrainOptionError(job, "table", "table " + Quote(mlp->name) + " has keys: hashed",
                            "a range table (keys: range) for the MLP's parameters");
  }
  const uint64_t inputs = uint64_t{fields} * embeddings->dim + dense;
  uint64_t params = 0, in = inputs;
  for (uint32_t out : ctr.hidden) {
    params += in * out + out;
    in = out;
  }
  params += in + 1;
  if (params != mlp->rows) {
    return TrainOptionError(
        job, "table",
        "table " + Quote(mlp->name) + " has " + std::to_string(mlp->rows) +
            " rows but the MLP (" + std::to_string(fields) + " fields x dim " +
            std::to_string(embeddings->dim) + " + " + std::to_string(dense) +
            " dense inputs, hidden " + std::to_string(ctr.hidden.size()) + " layers, 1 output) has " +
            std::to_string(params) + " parameters",
        "rows equal to the parameter count (" + std::to_string(params) + ")");
  }
  if (train.test_samples < 1) {
    return TrainOptionError(job, "test_samples", "got 0", "held-out samples >= 1");
  }
  return Status::Ok();
}

// The programs, one row each.
const ProgramSpec kSpecs[] = {
    {.name = "linear_regression",
     .read_keys = ReadLinearRegressionKeys,
     .check = CheckLinearRegression,
     .needs_servers = true},
    {.name = "mlp", .read_keys = ReadMlpKeys, .check = CheckMlp, .evaluates = true},
    {.name = "sparse_logistic_regression",
     .read_keys = ReadFeaturesIfPresent,
     .check = CheckSparseLogisticRegression,
     .evaluates = true},
    {.name = "matrix_factorization",
     .read_keys = ReadFeaturesIfPresent,
     .check = CheckMatrixFactorization,
     .evaluates = true},
    {.name = "ctr", .read_keys = ReadCtrKeys, .check = CheckCtr, .evaluates = true},
};

}  // namespace

std::span<const ProgramSpec> ProgramSpecs() { return kSpecs; }

std::vector<std::string_view> ProgramNames() {
  std::vector<std::string_view> names;
  for (const ProgramSpec& spec : kSpecs) names.push_back(spec.name);
  return names;
}

const ProgramSpec* FindProgramSpec(std::string_view name) {
  for (const ProgramSpec& spec : kSpecs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

}  // namespace ps
