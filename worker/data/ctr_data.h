// Click-through-rate data for the ctr program (worker/ctr_training.h):
// samples of `fields` categorical fields and `dense` real features with a
// 0/1 click label, generated from a planted teacher (GenerateCtrData) or
// read from a file in the Criteo TSV format (ReadCriteoTsv).
//
// Ids. The value v of field f is the 64-bit id CtrId(f, v) = f * 2^48 + v,
// so one hashed table holds every field's embeddings and the same value in
// two fields names two rows. Values are below 2^48 - 1; kCtrMissing marks
// a field a sample has no value for (an empty Criteo column), a row of its
// own per field.
//
// The teacher. Field f's value v has a vector of teacher_dim standard
// normals drawn from (seed, id) alone, and each dense feature is a standard
// normal. A sample's logit z is a one-hidden-layer ReLU network (16 units,
// weights fixed by the seed) of its fields' vectors and its dense features,
// scaled so that z has a variance near 2.5 and the click rate is near 0.3;
// the label is Bernoulli(sigmoid(z)). The ctr model (worker/models/ctr.h)
// can represent the teacher exactly (embeddings of dim >= teacher_dim, a
// hidden layer of >= 16 units), so what separates them is data and
// training. No model does better on average than the teacher's own
// probabilities: the log-loss at them (MeanLogLoss of teacher_logits) is
// the best a model can reach.
//
// Determinism and partition as in worker/data/generators.h: a sample is a
// pure function of (seed, global index); rank r of M gets the contiguous
// block ShardRows(N, M, r) of samples (of the file's lines, for Criteo), and
// the blocks of all ranks concatenated equal the M = 1 data.
//
// Thread-safe: the functions keep no state.
#ifndef PS_WORKER_DATA_CTR_DATA_H_
#define PS_WORKER_DATA_CTR_DATA_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace ps {

// Bits of a field's value in an id: values are below 2^48 - 1.
inline constexpr uint32_t kCtrValueBits = 48;
// The value of a field a sample has none for.
inline constexpr uint64_t kCtrMissing = (uint64_t{1} << kCtrValueBits) - 1;
// The most fields an id can name.
inline constexpr uint32_t kCtrMaxFields = 1u << (64 - kCtrValueBits);

// The id of value `value` of field `field`.
// REQUIRES: field < kCtrMaxFields, value <= kCtrMissing.
inline uint64_t CtrId(uint32_t field, uint64_t value) {
  return (uint64_t{field} << kCtrValueBits) | value;
}

struct CtrData {
  uint32_t fields = 0;
  uint32_t dense = 0;
  // num_samples() x fields ids (CtrId), row-major.
  std::vector<uint64_t> ids;
  // num_samples() x dense values, row-major.
  std::vector<float> dense_values;
  // 0 or 1.
  std::vector<int32_t> labels;
  // Generated data: each sample's logit under the planted teacher (its
  // click probability is the sigmoid of it). Empty for data read from a
  // file.
  std::vector<float> teacher_logits;

  size_t num_samples() const { return labels.size(); }
  // Appends sample i of `other`, which has the same fields and dense.
  void Append(const CtrData& other, size_t i);
  // Removes every sample (the fields and dense stay).
  void ClearSamples() {
    ids.clear();
    dense_values.clear();
    labels.clear();
    teacher_logits.clear();
  }
};

struct CtrDataOptions {
  // Categorical fields, 1 .. kCtrMaxFields. Default 8.
  uint32_t fields = 8;
  // Dense features, >= 0. Default 4.
  uint32_t dense = 4;
  // Each field's values are 1 .. vocabulary[f], drawn from a Zipf law (value
  // 1 the most frequent); one entry gives every field that vocabulary. Each
  // in 1 .. 2^40. Default 10^5.
  std::vector<uint64_t> vocabulary = {100000};
  // The Zipf law's exponent: value k has weight 1 / k^zipf_exponent. > 0.
  double zipf_exponent = 1.1;
  // Samples in the whole data set (all ranks together).
  uint64_t num_samples = 100000;
  // Global index of the set's sample 0; a held-out set is fresh draws with
  // first_sample past the training set's. first_sample + num_samples <= 2^64 - 1.
  uint64_t first_sample = 0;
  // Length of the teacher's interaction vectors u, 1 .. 64. Default 4.
  uint32_t teacher_dim = 4;
  uint64_t seed = 1;

  // The vocabulary of field f.
  uint64_t Vocabulary(uint32_t f) const { return vocabulary[vocabulary.size() == 1 ? 0 : f]; }
  // InvalidArgument naming the field for any impossible value above.
  Status Validate() const;
};

// Rank `rank`'s share of the generated data set: the samples first_sample +
// ShardRows(num_samples, num_ranks, rank). InvalidArgument when
// options.Validate() fails or the rank is impossible.
StatusOr<CtrData> GenerateCtrData(const CtrDataOptions& options, uint32_t rank,
                                  uint32_t num_ranks);

// The Criteo layout: a label, 13 integer columns, 26 categorical columns.
inline constexpr uint32_t kCriteoDense = 13;
inline constexpr uint32_t kCriteoFields = 26;

// Rank `rank`'s block ShardRows(lines, num_ranks, rank) of the lines of a
// Criteo TSV file (the first `max_lines` lines, or every line for 0): each
// line is a label (0 or 1), 13 integer columns and 26 categorical columns
// of up to 12 hex digits, tab-separated; any column but the label may be
// empty. An integer n becomes the dense value sign(n) * log(1 + |n|) (0 when
// empty); hex value v of column c becomes CtrId(c, v) (kCtrMissing when
// empty). Errors: NotFound or Internal for a file that cannot be read;
// InvalidArgument "<path>:<line>: ..." naming the column and what it holds
// for a malformed line, and for a file with fewer lines than ranks.
StatusOr<CtrData> ReadCriteoTsv(const std::string& path, uint32_t rank, uint32_t num_ranks,
                                uint64_t max_lines = 0);

// The mean log-loss of `labels` at `logits` (a sample's probability of label
// 1 is the sigmoid of its logit), computed without overflow for any logit.
// REQUIRES: logits.size() == labels.size() >= 1.
double MeanLogLoss(std::span<const float> logits, std::span<const int32_t> labels);

// The area under the ROC curve of `scores` for `labels` (0 or 1): the
// probability that a random positive scores above a random negative, ties
// counting one half. 0.5 when the labels are all one class.
// REQUIRES: scores.size() == labels.size().
double Auc(std::span<const float> scores, std::span<const int32_t> labels);

}  // namespace ps

#endif  // PS_WORKER_DATA_CTR_DATA_H_
