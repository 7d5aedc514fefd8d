#include "worker/data/ctr_data.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <numeric>
#include <string_view>

#include "common/key_range.h"
#include "common/text.h"
#include "worker/data/generators.h"
#include "worker/data/random_stream.h"

namespace ps {
namespace {

// Apart from the tags of worker/data/generators.cc.
enum CtrStreamTag : uint64_t {
  kTeacherIdTag = 0xc7e0'0001,
  kCtrSampleTag = 0xc7e0'0003,
  kTeacherNetTag = 0xc7e0'0004,
};

// The teacher: a one-hidden-layer ReLU network over the sample's id
// vectors and dense features (fixed by the seed), scaled so that its logit
// has a variance near 2.5 (an AUC near 0.8 at its own probabilities) and a
// click rate near 0.3.
class Teacher {
 public:
  static constexpr uint32_t kHidden = 16;

  explicit Teacher(const CtrDataOptions& o)
      : fields_(o.fields), dim_(o.teacher_dim), inputs_(o.fields * o.teacher_dim + o.dense) {
    Stream s(o.seed, kTeacherNetTag, 0);
    // Unit-variance pre-activations for unit-variance inputs; a ReLU unit
    // then has mean 1/sqrt(2 pi) and variance 1/2 - 1/(2 pi).
    const double in_scale = 1.0 / std::sqrt(static_cast<double>(inputs_));
    const double out_scale = std::sqrt(2.5 / (kHidden * (0.5 - 0.5 / std::numbers::pi)));
    hidden_weights_.resize(size_t{kHidden} * inputs_);
    for (double& w : hidden_weights_) w = in_scale * s.Normal();
    double mean = 0;
    for (double& w : out_weights_) {
      w = out_scale * s.Normal();
      mean += w / std::sqrt(2.0 * std::numbers::pi);
    }
    bias_ = -0.9 - mean;
  }

  // The vector of an id (dim_ standard normals) into `out`.
  void IdVector(uint64_t seed, uint64_t id, double* out) const {
    Stream s(seed, kTeacherIdTag, id);
    for (uint32_t k = 0; k < dim_; ++k) out[k] = s.Normal();
  }

  // The logit of an input (fields_ id vectors, then the dense features).
  double Logit(const std::vector<double>& input) const {
    double z = bias_;
    for (uint32_t j = 0; j < kHidden; ++j) {
      const double* w = hidden_weights_.data() + size_t{j} * inputs_;
      const double a = std::inner_product(input.begin(), input.end(), w, 0.0);
      z += out_weights_[j] * std::max(a, 0.0);
    }
    return z;
  }

  uint32_t inputs() const { return inputs_; }

 private:
  const uint32_t fields_, dim_, inputs_;
  std::vector<double> hidden_weights_;
  double out_weights_[kHidden] = {};
  double bias_ = 0;
};

Status BadOption(const char* field, const std::string& value, const std::string& want) {
  return InvalidArgumentError(std::string("CtrDataOptions.") + field + " = " + value + ": " +
                              want);
}

}  // namespace

void CtrData::Append(const CtrData& other, size_t i) {
  ids.insert(ids.end(), other.ids.begin() + static_cast<ptrdiff_t>(i * fields),
             other.ids.begin() + static_cast<ptrdiff_t>((i + 1) * fields));
  dense_values.insert(dense_values.end(),
                      other.dense_values.begin() + static_cast<ptrdiff_t>(i * dense),
                      other.dense_values.begin() + static_cast<ptrdiff_t>((i + 1) * dense));
  labels.push_back(other.labels[i]);
  if (!other.teacher_logits.empty()) teacher_logits.push_back(other.teacher_logits[i]);
}

Status CtrDataOptions::Validate() const {
  if (fields < 1 || fields > kCtrMaxFields) {
    return BadOption("fields", std::to_string(fields),
                     "must be in 1.." + std::to_string(kCtrMaxFields));
  }
  if (vocabulary.size() != 1 && vocabulary.size() != fields) {
    return BadOption("vocabulary", std::to_string(vocabulary.size()) + " entries",
                     "one entry (every field) or one per field");
  }
  for (uint64_t v : vocabulary) {
    if (v < 1 || v > (uint64_t{1} << 40)) {
      return BadOption("vocabulary", std::to_string(v), "each must be in 1..2^40");
    }
  }
  if (!(zipf_exponent > 0) || !std::isfinite(zipf_exponent)) {
    return BadOption("zipf_exponent", std::to_string(zipf_exponent), "must be finite and > 0");
  }
  if (first_sample > UINT64_MAX - num_samples) {
    return BadOption("first_sample", std::to_string(first_sample),
                     "first_sample + num_samples must not exceed 2^64 - 1");
  }
  if (teacher_dim < 1 || teacher_dim > 64) {
    return BadOption("teacher_dim", std::to_string(teacher_dim), "must be in 1..64");
  }
  return Status::Ok();
}

StatusOr<CtrData> GenerateCtrData(const CtrDataOptions& options, uint32_t rank,
                                  uint32_t num_ranks) {
  PS_RETURN_IF_ERROR(options.Validate());
  PS_RETURN_IF_ERROR(CheckRank("GenerateCtrData", rank, num_ranks));
  const uint32_t fields = options.fields, dense = options.dense, t = options.teacher_dim;
  const Teacher teacher(options);
  std::vector<ZipfSampler> values;
  for (uint32_t f = 0; f < fields; ++f) {
    values.emplace_back(options.Vocabulary(f), options.zipf_exponent);
  }
  const RowRange local = ShardRows(options.num_samples, num_ranks, rank);
  CtrData data;
  data.fields = fields;
  data.dense = dense;
  data.ids.reserve(local.size() * fields);
  data.dense_values.reserve(local.size() * dense);
  data.labels.reserve(local.size());
  data.teacher_logits.reserve(local.size());
  std::vector<double> input(teacher.inputs());
  for (uint64_t i = local.begin; i < local.end; ++i) {
    Stream s(options.seed, kCtrSampleTag, options.first_sample + i);
    for (uint32_t f = 0; f < fields; ++f) {
      const uint64_t id = CtrId(f, values[f].Sample(s));
      data.ids.push_back(id);
      teacher.IdVector(options.seed, id, input.data() + size_t{f} * t);
    }
    for (uint32_t d = 0; d < dense; ++d) {
      const double x = s.Normal();
      data.dense_values.push_back(static_cast<float>(x));
      input[size_t{fields} * t + d] = x;
    }
    const double z = teacher.Logit(input);
    const double p = 1.0 / (1.0 + std::exp(-z));
    data.labels.push_back(s.Uniform() < p ? 1 : 0);
    data.teacher_logits.push_back(static_cast<float>(z));
  }
  return data;
}

namespace {

// One line of a Criteo file, parsed into `data`; `where` is "<path>:<line>".
Status ParseCriteoLine(std::string_view line, const std::string& where, CtrData* data) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::vector<std::string_view> columns;
  for (size_t at = 0;;) {
    const size_t tab = line.find('\t', at);
    columns.push_back(line.substr(at, tab == std::string_view::npos ? line.npos : tab - at));
    if (tab == std::string_view::npos) break;
    at = tab + 1;
  }
  constexpr size_t kColumns = 1 + kCriteoDense + kCriteoFields;
  if (columns.size() != kColumns) {
    return InvalidArgumentError(where + ": " + std::to_string(columns.size()) +
                                " tab-separated columns; expected " + std::to_string(kColumns) +
                                " (a label, 13 integer and 26 categorical columns: the Criteo "
                                "format)");
  }
  const auto bad = [&](size_t column, std::string_view what) {
    return InvalidArgumentError(where + ": column " + std::to_string(column + 1) + " holds " +
                                Quote(std::string(columns[column])) + "; expected " +
                                std::string(what));
  };
  if (columns[0] != "0" && columns[0] != "1") return bad(0, "a label, 0 or 1");
  data->labels.push_back(columns[0] == "1" ? 1 : 0);
  for (uint32_t d = 0; d < kCriteoDense; ++d) {
    const std::string_view text = columns[1 + d];
    double value = 0;
    if (!text.empty()) {
      const bool negative = text.front() == '-';
      const std::string_view digits = negative ? text.substr(1) : text;
      uint64_t n = 0;
      if (digits.empty() || digits.size() > 18 ||
          !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return bad(1 + d, "an integer (I" + std::to_string(d + 1) + ") or nothing");
      }
      for (char c : digits) n = n * 10 + static_cast<uint64_t>(c - '0');
      value = std::log1p(static_cast<double>(n)) * (negative ? -1.0 : 1.0);
    }
    data->dense_values.push_back(static_cast<float>(value));
  }
  for (uint32_t f = 0; f < kCriteoFields; ++f) {
    const std::string_view text = columns[1 + kCriteoDense + f];
    uint64_t value = kCtrMissing;
    if (!text.empty()) {
      if (text.size() > 12) {
        return bad(1 + kCriteoDense + f,
                   "at most 12 hex digits (C" + std::to_string(f + 1) + ") or nothing");
      }
      value = 0;
      for (char c : text) {
        int digit = -1;
        if (c >= '0' && c <= '9') digit = c - '0';
        if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
        if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
        if (digit < 0) {
          return bad(1 + kCriteoDense + f, "hex digits (C" + std::to_string(f + 1) + ") or nothing");
        }
        value = value * 16 + static_cast<uint64_t>(digit);
      }
      // 12 hex digits of all ones is the missing value itself.
      value = std::min(value, kCtrMissing - 1);
    }
    data->ids.push_back(CtrId(f, value));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<CtrData> ReadCriteoTsv(const std::string& path, uint32_t rank, uint32_t num_ranks,
                                uint64_t max_lines) {
  PS_RETURN_IF_ERROR(CheckRank("ReadCriteoTsv", rank, num_ranks));
  std::ifstream in(path);
  if (!in) {
    return NotFoundError(path + ": cannot open the Criteo file (" + std::strerror(errno) +
                         "); check train.ctr.criteo_train / criteo_test");
  }
  // Lines first: every rank's block depends on the count.
  uint64_t lines = 0;
  std::string line;
  while ((max_lines == 0 || lines < max_lines) && std::getline(in, line)) ++lines;
  if (in.bad()) return InternalError(path + ": read error after line " + std::to_string(lines));
  if (lines < num_ranks) {
    return InvalidArgumentError(path + ": " + std::to_string(lines) + " lines for " +
                                std::to_string(num_ranks) +
                                " workers; each worker needs at least one sample");
  }
  const RowRange block = ShardRows(lines, num_ranks, rank);
  in.clear();
  in.seekg(0);
  CtrData data;
  data.fields = kCriteoFields;
  data.dense = kCriteoDense;
  for (uint64_t n = 0; n < block.end && std::getline(in, line); ++n) {
    if (n < block.begin) continue;
    PS_RETURN_IF_ERROR(ParseCriteoLine(line, path + ":" + std::to_string(n + 1), &data));
  }
  if (data.num_samples() != block.size()) {
    return InternalError(path + ": the file changed while it was read (" +
                         std::to_string(data.num_samples()) + " of " +
                         std::to_string(block.size()) + " lines)");
  }
  return data;
}

double MeanLogLoss(std::span<const float> logits, std::span<const int32_t> labels) {
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    // log(1 + exp(-z)) for label 1, log(1 + exp(z)) for label 0.
    const double z = labels[i] == 1 ? -double{logits[i]} : double{logits[i]};
    sum += z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
  }
  return sum / static_cast<double>(logits.size());
}

double Auc(std::span<const float> scores, std::span<const int32_t> labels) {
  std::vector<uint32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney: the positives' ranks (ties: their mean rank), less the
  // least they can sum to.
  double positive_ranks = 0;
  uint64_t positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank = 0.5 * static_cast<double>(i + 1 + j);
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] == 1) {
        positive_ranks += mean_rank;
        ++positives;
      }
    }
    i = j;
  }
  const uint64_t negatives = scores.size() - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  const double p = static_cast<double>(positives);
  return (positive_ranks - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

}  // namespace ps
