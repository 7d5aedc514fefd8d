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
// Bags. A field is single-valued (one id per sample) unless it is a bag
// field (CtrBagField): a sample then holds a list of its values, a value
// possibly more than once, and the model's input for the field is the sum
// of their embeddings (an empty list: zeros). CtrData keeps every id of a
// sample together in field order, so a sample's ids name their fields
// themselves (CtrField) and per-sample offsets are all a bag needs.
//
// The teacher. Field f's value v has a vector of teacher_dim standard
// normals drawn from (seed, id) alone, and each dense feature is a standard
// normal. A sample's logit z is a one-hidden-layer ReLU network (16 units,
// weights fixed by the seed) of its fields' vectors (a bag field's: the
// sum of its values' vectors) and its dense features, scaled so that z has
// a variance near 2.5 and the click rate is near 0.3; the label is
// Bernoulli(sigmoid(z)). The ctr model (worker/models/ctr.h) can represent
// the teacher exactly (embeddings of dim >= teacher_dim, a hidden layer of
// >= 16 units), so what separates them is data and training. No model does
// better on average than the teacher's own probabilities: the log-loss at
// them (MeanLogLoss of teacher_logits) is the best a model can reach.
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
// The field an id names.
inline uint32_t CtrField(uint64_t id) { return static_cast<uint32_t>(id >> kCtrValueBits); }

// The most values a sample may hold in one bag field.
inline constexpr uint32_t kCtrMaxBagValues = 1024;

// A multi-valued field (train.ctr.bags): generated data draws 1..max_values
// of its values per sample, uniformly; a Criteo column of it holds up to
// max_values values separated by kCriteoBagSeparator.
struct CtrBagField {
  // The field, 0-based (Criteo column C(field + 1)); below the fields.
  uint32_t field = 0;
  // The most values a sample holds in it, 1..kCtrMaxBagValues.
  uint32_t max_values = 1;
};

struct CtrData {
  uint32_t fields = 0;
  uint32_t dense = 0;
  // Every sample's ids (CtrId), sample after sample, each sample's in field
  // order (CtrField never decreases within a sample): one id of each
  // single-valued field, a bag field's values in the sample's order.
  std::vector<uint64_t> ids;
  // Empty when every sample holds exactly one id per field: sample i's ids
  // are ids[i * fields, (i + 1) * fields). Otherwise (data with bag
  // fields) num_samples() + 1 entries from 0: sample i's ids are
  // ids[offsets[i], offsets[i + 1]).
  std::vector<uint64_t> offsets;
  // num_samples() x dense values, row-major.
  std::vector<float> dense_values;
  // 0 or 1.
  std::vector<int32_t> labels;
  // Generated data: each sample's logit under the planted teacher (its
  // click probability is the sigmoid of it). Empty for data read from a
  // file.
  std::vector<float> teacher_logits;

  size_t num_samples() const { return labels.size(); }
  // Whether the data has bag fields, its samples' ids found by offsets.
  bool has_bags() const { return !offsets.empty(); }
  // Where sample i's ids begin in `ids`; IdsBegin(num_samples()) is
  // ids.size(). REQUIRES: i <= num_samples().
  size_t IdsBegin(size_t i) const { return has_bags() ? offsets[i] : i * fields; }
  // Sample i's ids. REQUIRES: i < num_samples().
  std::span<const uint64_t> SampleIds(size_t i) const {
    return std::span<const uint64_t>(ids).subspan(IdsBegin(i), IdsBegin(i + 1) - IdsBegin(i));
  }
  // No samples, with this data's fields, dense and layout (offsets or not).
  CtrData EmptyLike() const;
  // Appends sample i of `other`, which has the same fields, dense and
  // layout (EmptyLike).
  void Append(const CtrData& other, size_t i);
  // Removes every sample (the fields, dense and layout stay).
  void ClearSamples();
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
  // The multi-valued fields, each at most once (none: every field holds one
  // value per sample, and the data has no offsets).
  std::vector<CtrBagField> bags;

  // The vocabulary of field f.
  uint64_t Vocabulary(uint32_t f) const { return vocabulary[vocabulary.size() == 1 ? 0 : f]; }
  // InvalidArgument naming the field for any impossible value above.
  Status Validate() const;
};

// The planted teacher of the generated data (see the top of this file),
// its weights open for a model that copies them. The logit of an input x
// (inputs() values: teacher_dim per field, then the dense features) is
// bias() + sum over units j of out_weights()[j] * max(0, sum over k of
// hidden_weights()[j * inputs() + k] * x[k]).
// Thread-compatible: constant after construction.
class CtrTeacher {
 public:
  static constexpr uint32_t kHidden = 16;

  // REQUIRES: options.Validate().ok().
  explicit CtrTeacher(const CtrDataOptions& options);

  // The vector of `id` (teacher_dim standard normals from (seed, id)) into
  // out[0, teacher_dim).
  void IdVector(uint64_t id, double* out) const;
  // The teacher's input for one sample's ids (as in CtrData) and dense
  // features, into `input` (inputs() values): each field's block the sum
  // of its ids' vectors (zeros for none), then the dense features.
  // REQUIRES: each id's field < fields; dense.size() == the options' dense.
  void Input(std::span<const uint64_t> ids, std::span<const double> dense,
             std::span<double> input) const;
  // The logit of an input of inputs() values.
  double Logit(std::span<const double> input) const;

  uint32_t inputs() const { return inputs_; }
  std::span<const double> hidden_weights() const { return hidden_weights_; }
  std::span<const double> out_weights() const { return out_weights_; }
  double bias() const { return bias_; }

 private:
  const uint64_t seed_;
  const uint32_t fields_, dim_, inputs_;
  std::vector<double> hidden_weights_;
  std::vector<double> out_weights_;
  double bias_ = 0;
};

// Rank `rank`'s share of the generated data set: the samples first_sample +
// ShardRows(num_samples, num_ranks, rank). InvalidArgument when
// options.Validate() fails or the rank is impossible.
StatusOr<CtrData> GenerateCtrData(const CtrDataOptions& options, uint32_t rank,
                                  uint32_t num_ranks);

// The Criteo layout: a label, 13 integer columns, 26 categorical columns.
inline constexpr uint32_t kCriteoDense = 13;
inline constexpr uint32_t kCriteoFields = 26;
// What separates the values of a bag field's column.
inline constexpr char kCriteoBagSeparator = ',';

// Rank `rank`'s block ShardRows(lines, num_ranks, rank) of the lines of a
// Criteo TSV file (the first `max_lines` lines, or every line for 0): each
// line is a label (0 or 1), 13 integer columns and 26 categorical columns
// of up to 12 hex digits, tab-separated; any column but the label may be
// empty. An integer n becomes the dense value sign(n) * log(1 + |n|) (0 when
// empty); hex value v of categorical column c (0-based) becomes CtrId(c, v)
// (kCtrMissing when empty). The column of a field in `bags` may hold up to
// its max_values hex values separated by kCriteoBagSeparator, a comma
// ("a3,ff,a3" is three values, a3 twice; empty: the one value
// kCtrMissing); with bags the data has offsets. Errors: NotFound or
// Internal for a file that cannot be read; InvalidArgument "<path>:<line>:
// ..." naming the column and what it holds for a malformed line, and for a
// file with fewer lines than ranks; InvalidArgument naming the entry for a
// bag of a field past the 26, named twice, or of max_values outside
// 1..kCtrMaxBagValues.
StatusOr<CtrData> ReadCriteoTsv(const std::string& path, uint32_t rank, uint32_t num_ranks,
                                uint64_t max_lines = 0, std::span<const CtrBagField> bags = {});

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
