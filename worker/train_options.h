// The train section of a job file: which training program ps_worker runs
// and its settings (config/README.md, `train`). Read here on top of
// common's loader (common/config.h), which knows only that the section
// belongs to another layer, and checked here: the limits every program
// shares, then the program's own reads and checks (its row in
// worker/programs.h).
//
// Messages have common's form, "<source>: train.<key>: <problem>; expected
// <what>", with the line and column where the loader can tell.
//
// Thread-safe: the functions keep no state.
#ifndef PS_WORKER_TRAIN_OPTIONS_H_
#define PS_WORKER_TRAIN_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/options.h"
#include "common/status.h"
#include "common/yaml_reader.h"
#include "worker/data/ctr_data.h"

namespace ps {

// Why a job without a train section runs no worker, and what such a file
// is for: "<path>: the job has no train section, so ps_worker has nothing to
// run; ...". ps_worker and ps_launch refuse such a job with it.
std::string NoTrainSectionMessage(const std::string& path);

// The program of a train section that names none.
inline constexpr std::string_view kDefaultTrainProgram = "linear_regression";

// The ctr program's own settings (train.ctr; config/README.md, "The ctr
// program"): its data (generated from a planted teacher, or Criteo files)
// and its model.
struct CtrOptions {
  // The hashed table (keys: hashed) of every field's embeddings; its dim is
  // the embedding's. train.table is the MLP's dense table.
  std::string embedding_table = "embeddings";
  // Categorical fields of the generated data, 1..1024. Default 8.
  uint32_t fields = 8;
  // Dense features of the generated data. Default 4.
  uint32_t dense = 4;
  // Values per field of the generated data (one entry: every field's; or
  // one per field), each 1..2^40. Default 100000.
  std::vector<uint64_t> vocabulary = {100000};
  // Zipf exponent of the generated values, > 0. Default 1.1.
  double zipf_exponent = 1.1;
  // The multi-valued fields, each named once, of the generated data or of
  // the Criteo files (CtrBagField, worker/data/ctr_data.h): field below the
  // fields, max_values 1..kCtrMaxBagValues. Default none.
  std::vector<CtrBagField> bags;
  // Sizes of the MLP's hidden layers, each >= 1 (none: a linear model over
  // the embeddings). Default [64, 32].
  std::vector<uint32_t> hidden = {64, 32};
  // Criteo TSV files (worker/data/ctr_data.h) to train and evaluate on
  // instead of generated data; both or neither. The fields and dense are
  // then the format's, 26 and 13.
  std::string criteo_train;
  std::string criteo_test;
};

struct TrainOptions {
  // What ps_worker trains: the name of a program (worker/programs.h). Empty
  // (the default of a job built in code): the job has no train section and
  // no training program. A train section without it: kDefaultTrainProgram.
  std::string program;
  // Name of the table that holds the parameters: dim 1, rows = features
  // (linear_regression, sparse_logistic_regression) or the MLP's parameter
  // count (mlp). Not used by matrix_factorization.
  std::string table = "weights";
  // matrix_factorization: the user and item factor tables (rows = users,
  // items; dim = the factorization's rank, the same for both).
  std::string user_table = "users";
  std::string item_table = "items";
  // mlp: layer sizes, 784 inputs first, 10 classes last, e.g. [784, 100, 10];
  // [784, 10] is softmax regression.
  std::vector<uint32_t> layers;
  // Worker 0 evaluates the model on held-out data every this many steps
  // (0: only at the end): test accuracy (mlp), log-loss (sparse logistic
  // regression), RMSE (matrix factorization). Default 0. With
  // cluster.evaluator the evaluator process does, at every this many clocks
  // of the job (every worker's), and worker 0 only trains.
  uint32_t eval_every = 0;
  // mlp: folder of the Fashion-MNIST IDX files.
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  // linear_regression: features of the generated data; must equal that
  // table's rows. sparse_logistic_regression: 0 or the table's rows.
  uint64_t features = 0;
  // Samples generated per worker (linear and sparse logistic regression).
  // Default 4096.
  uint64_t samples_per_worker = 4096;
  // sparse_logistic_regression: held-out samples worker 0 evaluates on
  // (fresh draws from the same weights). >= 1. Default 10000.
  uint64_t test_samples = 10000;
  // matrix_factorization: probability that a (user, item) rating is
  // observed, in (0, 1]. Default 0.05.
  double observe_probability = 0.05;
  // matrix_factorization: fraction of the ratings held out for the test
  // RMSE, in [0, 1). Default 0.1.
  double test_fraction = 0.1;
  // Minibatch size; 1 <= batch_size <= samples_per_worker. Default 64.
  uint32_t batch_size = 64;
  // Steps (pull, gradient, push) per worker. Default 200.
  uint32_t iterations = 200;
  // Stddev of the label noise (linear regression) or the rating noise
  // (matrix factorization); finite, >= 0. Default 0.01.
  float noise = 0.01f;
  // ctr: its data and model.
  CtrOptions ctr;
  // Seed of the true weights and the data.
  uint64_t seed = 42;
  // Print the loss every this many iterations (0: only first and last).
  uint32_t log_every = 20;
  // The program every worker runs instead of ps_worker, started by
  // ps_launch: its argv, e.g. ["python3", "train.py"] (a Python worker,
  // docs/python.md), to which ps_launch appends the flags it gives
  // ps_worker (--config FILE --rank N, and --log-level, --cpu-threads).
  // deploy/slurm/ps_job.sbatch runs it too (--config FILE, the rank from
  // SLURM_PROCID). Relative paths are the launcher's working folder's. Empty (the
  // default): ps_worker runs `program`. With a command the job names no
  // program, and the programs' keys and the evaluator do not apply.
  std::vector<std::string> command;
  // When set, every worker appends a row per progress line to this CSV
  // (time_s, clock, worker, epoch, loss, metric_name, metric,
  // samples_per_s, staleness_wait_s); the file is created with its header
  // when missing. Default empty: none.
  std::string metrics_csv;
};

// A job with its train section: what ps_worker and ps_launch read. It is a
// JobOptions, so it goes wherever a job does (the client, the parameter
// stores, the launcher); JobOptions::Validate() checks that part and
// ValidateTrain() the train section.
struct TrainJob : JobOptions {
  TrainOptions train;
};

// LoadJobFile (common/config.h) with the train section read, then
// ValidateTrain. Errors: those of LoadJobFile; InvalidArgument for a bad
// train section (an unknown key or program, a wrong type, a missing key the
// program requires, a value the checks refuse).
StatusOr<TrainJob> LoadTrainJobFile(const std::string& path);

// As LoadTrainJobFile, from YAML text in memory (LoadJobString).
StatusOr<TrainJob> LoadTrainJobString(const std::string& yaml_text, const std::string& source);

// The train section's checks, on a job loaded or built in code: none
// without a program (not a training job); else a known program, the limits
// every program shares (batch_size, iterations, noise), then the program's
// own checks (TrainProgram::check). InvalidArgument "<source>: train.<key>:
// ..." naming the first problem; an unknown program lists the programs.
Status ValidateTrain(const TrainJob& job);

// Pieces of the programs' own reads and checks (worker/programs.h).

// InvalidOption (common/options.h) at "train.<key>" of the job's source.
Status TrainOptionError(const TrainJob& job, std::string_view key, std::string_view problem,
                        std::string_view expected);

// The table `name` that train.<key> names, or InvalidArgument listing the
// job's tables.
StatusOr<const TableOptions*> TrainTable(const TrainJob& job, std::string_view key,
                                         const std::string& name);

// train.table, which must have dim 1 (one weight per row), or
// InvalidArgument.
StatusOr<const TableOptions*> WeightTable(const TrainJob& job);

// InvalidArgument unless samples_per_worker >= 1 and batch_size <=
// samples_per_worker.
Status CheckSamplesPerWorker(const TrainJob& job);

// Reads train.features when the section has it (a program that takes it as
// an option); `section` is the train map.
Status ReadFeaturesIfPresent(const YamlReader& reader, const YamlMap& section,
                             TrainOptions* train);

}  // namespace ps

#endif  // PS_WORKER_TRAIN_OPTIONS_H_
