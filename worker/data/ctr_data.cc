#include "worker/data/ctr_data.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <numeric>
#include <optional>
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

Status BadOption(std::string_view field, const std::string& value, const std::string& want) {
  return InvalidArgumentError("CtrDataOptions." + std::string(field) + " = " + value + ": " + want);
}

// The first impossible entry of `bags` for data of `fields` fields:
// InvalidArgument "<what>bags[i].<key> = <value>: <what is allowed>".
Status CheckBags(std::span<const CtrBagField> bags, uint32_t fields, const std::string& what) {
  std::vector<int64_t> named_by(fields, -1);
  for (size_t i = 0; i < bags.size(); ++i) {
    const std::string entry = what + "bags[" + std::to_string(i) + "].";
    const CtrBagField& bag = bags[i];
    if (bag.field >= fields) {
      return InvalidArgumentError(entry + "field = " + std::to_string(bag.field) +
                                  ": must be a field of the data, 0.." +
                                  std::to_string(fields - 1));
    }
    if (named_by[bag.field] >= 0) {
      return InvalidArgumentError(entry + "field = " + std::to_string(bag.field) +
                                  ": bags[" + std::to_string(named_by[bag.field]) +
                                  "] names it too; each field at most once");
    }
    named_by[bag.field] = static_cast<int64_t>(i);
    if (bag.max_values < 1 || bag.max_values > kCtrMaxBagValues) {
      return InvalidArgumentError(entry + "max_values = " + std::to_string(bag.max_values) +
                                  ": must be in 1.." + std::to_string(kCtrMaxBagValues));
    }
  }
  return Status::Ok();
}

// The most values of each field in a sample: 0 for a single-valued field,
// a bag's max_values.
std::vector<uint32_t> MaxValuesByField(std::span<const CtrBagField> bags, uint32_t fields) {
  std::vector<uint32_t> max_values(fields, 0);
  for (const CtrBagField& bag : bags) max_values[bag.field] = bag.max_values;
  return max_values;
}

}  // namespace

CtrData CtrData::EmptyLike() const {
  CtrData empty;
  empty.fields = fields;
  empty.dense = dense;
  if (has_bags()) empty.offsets = {0};
  return empty;
}

void CtrData::Append(const CtrData& other, size_t i) {
  const std::span<const uint64_t> sample = other.SampleIds(i);
  ids.insert(ids.end(), sample.begin(), sample.end());
  if (has_bags()) offsets.push_back(ids.size());
  dense_values.insert(dense_values.end(),
                      other.dense_values.begin() + static_cast<ptrdiff_t>(i * dense),
                      other.dense_values.begin() + static_cast<ptrdiff_t>((i + 1) * dense));
  labels.push_back(other.labels[i]);
  if (!other.teacher_logits.empty()) teacher_logits.push_back(other.teacher_logits[i]);
}

void CtrData::ClearSamples() {
  ids.clear();
  if (has_bags()) offsets = {0};
  dense_values.clear();
  labels.clear();
  teacher_logits.clear();
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
  return CheckBags(bags, fields, "CtrDataOptions.");
}

CtrTeacher::CtrTeacher(const CtrDataOptions& o)
    : seed_(o.seed),
      fields_(o.fields),
      dim_(o.teacher_dim),
      inputs_(o.fields * o.teacher_dim + o.dense),
      out_weights_(kHidden) {
  Stream s(o.seed, kTeacherNetTag, 0);
  // Unit-variance pre-activations for unit-variance inputs; a ReLU unit
  // then has mean 1/sqrt(2 pi) and variance 1/2 - 1/(2 pi). A bag field's
  // input sums (1 + max_values) / 2 vectors on average, so its weights are
  // smaller by the root of that: its part of a pre-activation keeps about
  // one vector's variance.
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(inputs_));
  const double out_scale = std::sqrt(2.5 / (kHidden * (0.5 - 0.5 / std::numbers::pi)));
  std::vector<double> column_scale(inputs_, 1.0);
  for (const CtrBagField& bag : o.bags) {
    std::fill_n(column_scale.begin() + static_cast<ptrdiff_t>(size_t{bag.field} * dim_), dim_,
                std::sqrt(2.0 / (1.0 + bag.max_values)));
  }
  hidden_weights_.resize(size_t{kHidden} * inputs_);
  for (size_t i = 0; i < hidden_weights_.size(); ++i) {
    hidden_weights_[i] = in_scale * s.Normal() * column_scale[i % inputs_];
  }
  double mean = 0;
  for (double& w : out_weights_) {
    w = out_scale * s.Normal();
    mean += w / std::sqrt(2.0 * std::numbers::pi);
  }
  bias_ = -0.9 - mean;
}

void CtrTeacher::IdVector(uint64_t id, double* out) const {
  Stream s(seed_, kTeacherIdTag, id);
  for (uint32_t k = 0; k < dim_; ++k) out[k] = s.Normal();
}

void CtrTeacher::Input(std::span<const uint64_t> ids, std::span<const double> dense,
                       std::span<double> input) const {
  std::fill(input.begin(), input.end(), 0.0);
  double vector[64];
  for (uint64_t id : ids) {
    IdVector(id, vector);
    double* block = input.data() + size_t{CtrField(id)} * dim_;
    for (uint32_t k = 0; k < dim_; ++k) block[k] += vector[k];
  }
  std::copy(dense.begin(), dense.end(), input.begin() + size_t{fields_} * dim_);
}

double CtrTeacher::Logit(std::span<const double> input) const {
  double z = bias_;
  for (uint32_t j = 0; j < kHidden; ++j) {
    const double* w = hidden_weights_.data() + size_t{j} * inputs_;
    const double a = std::inner_product(input.begin(), input.end(), w, 0.0);
    z += out_weights_[j] * std::max(a, 0.0);
  }
  return z;
}

StatusOr<CtrData> GenerateCtrData(const CtrDataOptions& options, uint32_t rank,
                                  uint32_t num_ranks) {
  PS_RETURN_IF_ERROR(options.Validate());
  PS_RETURN_IF_ERROR(CheckRank("GenerateCtrData", rank, num_ranks));
  const uint32_t fields = options.fields, dense = options.dense;
  const CtrTeacher teacher(options);
  std::vector<ZipfSampler> values;
  for (uint32_t f = 0; f < fields; ++f) {
    values.emplace_back(options.Vocabulary(f), options.zipf_exponent);
  }
  const std::vector<uint32_t> max_values = MaxValuesByField(options.bags, fields);
  // Ids a sample holds on average.
  double ids_per_sample = fields;
  for (const CtrBagField& bag : options.bags) ids_per_sample += (bag.max_values - 1) / 2.0;
  const RowRange local = ShardRows(options.num_samples, num_ranks, rank);
  CtrData data;
  data.fields = fields;
  data.dense = dense;
  data.ids.reserve(static_cast<size_t>(static_cast<double>(local.size()) * ids_per_sample));
  if (!options.bags.empty()) {
    data.offsets.reserve(local.size() + 1);
    data.offsets.push_back(0);
  }
  data.dense_values.reserve(local.size() * dense);
  data.labels.reserve(local.size());
  data.teacher_logits.reserve(local.size());
  std::vector<double> input(teacher.inputs()), dense_input(dense);
  for (uint64_t i = local.begin; i < local.end; ++i) {
    Stream s(options.seed, kCtrSampleTag, options.first_sample + i);
    const size_t first_id = data.ids.size();
    for (uint32_t f = 0; f < fields; ++f) {
      // A bag's length, then its values; a single-valued field draws its
      // value alone.
      const uint64_t count = max_values[f] == 0 ? 1 : 1 + s.Next() % max_values[f];
      for (uint64_t v = 0; v < count; ++v) data.ids.push_back(CtrId(f, values[f].Sample(s)));
    }
    if (data.has_bags()) data.offsets.push_back(data.ids.size());
    for (uint32_t d = 0; d < dense; ++d) {
      dense_input[d] = s.Normal();
      data.dense_values.push_back(static_cast<float>(dense_input[d]));
    }
    teacher.Input(std::span<const uint64_t>(data.ids).subspan(first_id), dense_input, input);
    const double z = teacher.Logit(input);
    const double p = 1.0 / (1.0 + std::exp(-z));
    data.labels.push_back(s.Uniform() < p ? 1 : 0);
    data.teacher_logits.push_back(static_cast<float>(z));
  }
  return data;
}

namespace {

// The pieces of `text` between the `separator`s (one for no separator).
std::vector<std::string_view> SplitOn(std::string_view text, char separator) {
  std::vector<std::string_view> pieces;
  for (size_t at = 0;;) {
    const size_t end = text.find(separator, at);
    pieces.push_back(text.substr(at, end == std::string_view::npos ? text.npos : end - at));
    if (end == std::string_view::npos) return pieces;
    at = end + 1;
  }
}

// A Criteo category: 1..12 hex digits; nullopt for anything else.
std::optional<uint64_t> ParseCriteoHex(std::string_view text) {
  if (text.empty() || text.size() > 12) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return std::nullopt;
    value = value * 16 + static_cast<uint64_t>(digit);
  }
  // 12 hex digits of all ones is the missing value itself.
  return std::min(value, kCtrMissing - 1);
}

// One line of a Criteo file, parsed into `data`; `where` is "<path>:<line>";
// `max_values` is MaxValuesByField of the file's bags.
Status ParseCriteoLine(std::string_view line, const std::string& where,
                       const std::vector<uint32_t>& max_values, CtrData* data) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::vector<std::string_view> columns = SplitOn(line, '\t');
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
    const size_t column = 1 + kCriteoDense + f;
    const std::string_view text = columns[column];
    // Built for an error only: a file has millions of lines.
    const auto name = [f] { return "C" + std::to_string(f + 1); };
    if (text.empty()) {
      data->ids.push_back(CtrId(f, kCtrMissing));
      continue;
    }
    if (max_values[f] == 0) {
      const std::optional<uint64_t> value = ParseCriteoHex(text);
      if (!value) {
        if (text.find(kCriteoBagSeparator) != std::string_view::npos) {
          return bad(column, "one hex value (" + name() +
                                 " is not a bag field; a list of values needs an entry in "
                                 "train.ctr.bags) or nothing");
        }
        return bad(column, text.size() > 12 ? "at most 12 hex digits (" + name() + ") or nothing"
                                            : "hex digits (" + name() + ") or nothing");
      }
      data->ids.push_back(CtrId(f, *value));
      continue;
    }
    const auto bag = [&] {
      return "up to " + std::to_string(max_values[f]) +
             " values of 1..12 hex digits separated by '" + kCriteoBagSeparator + "' (" + name() +
             ", a bag field) or nothing";
    };
    const std::vector<std::string_view> items = SplitOn(text, kCriteoBagSeparator);
    if (items.size() > max_values[f]) {
      return bad(column, bag() + "; it holds " + std::to_string(items.size()) + " values");
    }
    for (size_t n = 0; n < items.size(); ++n) {
      const std::optional<uint64_t> value = ParseCriteoHex(items[n]);
      if (!value) {
        return bad(column, bag() + "; value " + std::to_string(n + 1) + " is " +
                               Quote(std::string(items[n])));
      }
      data->ids.push_back(CtrId(f, *value));
    }
  }
  if (data->has_bags()) data->offsets.push_back(data->ids.size());
  return Status::Ok();
}

}  // namespace

StatusOr<CtrData> ReadCriteoTsv(const std::string& path, uint32_t rank, uint32_t num_ranks,
                                uint64_t max_lines, std::span<const CtrBagField> bags) {
  PS_RETURN_IF_ERROR(CheckRank("ReadCriteoTsv", rank, num_ranks));
  PS_RETURN_IF_ERROR(CheckBags(bags, kCriteoFields, "ReadCriteoTsv: "));
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
  if (!bags.empty()) data.offsets = {0};
  const std::vector<uint32_t> max_values = MaxValuesByField(bags, kCriteoFields);
  for (uint64_t n = 0; n < block.end && std::getline(in, line); ++n) {
    if (n < block.begin) continue;
    PS_RETURN_IF_ERROR(
        ParseCriteoLine(line, path + ":" + std::to_string(n + 1), max_values, &data));
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
