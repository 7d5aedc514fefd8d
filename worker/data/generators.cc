#include "worker/data/generators.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "worker/data/random_stream.h"

namespace ps {
namespace {

// Distinct tags keep the streams of different quantities independent even
// when their indices coincide.
enum StreamTag : uint64_t {
  kWeightTag = 1,
  kSampleTag = 2,
  kScatterTag = 3,
  kUserTag = 4,
  kItemTag = 5,
  kObserveTag = 6,
};

Status BadField(const char* options, const char* field, const std::string& value,
                const char* want) {
  return InvalidArgumentError(std::string(options) + "." + field + " = " + value + ": " + want);
}

// (multiplier, offset) of the bijection k -> (k * a + c) mod n; a is coprime
// with n, so the map is a permutation of 0..n-1.
std::pair<uint64_t, uint64_t> ScatterParams(const SparseClickOptions& o) {
  const uint64_t n = o.num_features;
  Stream s(o.seed, kScatterTag, 0);
  uint64_t a = s.Next() % n;
  while (std::gcd(a, n) != 1) a = (a + 1) % n;
  return {a, s.Next() % n};
}

uint64_t Scatter(uint64_t k, uint64_t n, std::pair<uint64_t, uint64_t> ac) {
  return static_cast<uint64_t>((Uint128{k} * ac.first + ac.second) % n);
}

std::vector<float> TrueWeights(const SparseClickOptions& o) {
  std::vector<float> w(o.num_features, 0.0f);
  for (uint64_t j = 0; j < o.num_features; ++j) {
    Stream s(o.seed, kWeightTag, j);
    if (s.Uniform() < o.weight_density) w[j] = static_cast<float>(o.weight_stddev * s.Normal());
  }
  return w;
}

}  // namespace

Status CheckRank(const char* what, uint32_t rank, uint32_t num_ranks) {
  if (num_ranks == 0 || rank >= num_ranks) {
    return InvalidArgumentError(std::string(what) + ": rank " + std::to_string(rank) + " of " +
                                std::to_string(num_ranks) +
                                " ranks is impossible; pass num_ranks >= 1 and rank < num_ranks");
  }
  return Status::Ok();
}

Status SparseClickOptions::Validate() const {
  constexpr char kName[] = "SparseClickOptions";
  if (num_features == 0) return BadField(kName, "num_features", "0", "must be >= 1");
  if (first_sample > UINT64_MAX - num_samples) {
    return BadField(kName, "first_sample", std::to_string(first_sample),
                    "first_sample + num_samples must not exceed 2^64 - 1");
  }
  if (!(zipf_exponent > 0) || !std::isfinite(zipf_exponent)) {
    return BadField(kName, "zipf_exponent", std::to_string(zipf_exponent),
                    "must be finite and > 0");
  }
  if (min_features < 1 || min_features > max_features || max_features > num_features / 2) {
    return BadField(kName, "min_features/max_features",
                    std::to_string(min_features) + "/" + std::to_string(max_features),
                    "need 1 <= min_features <= max_features <= num_features / 2");
  }
  if (!(weight_density > 0 && weight_density <= 1)) {
    return BadField(kName, "weight_density", std::to_string(weight_density), "must be in (0, 1]");
  }
  if (!(weight_stddev >= 0) || !std::isfinite(weight_stddev)) {
    return BadField(kName, "weight_stddev", std::to_string(weight_stddev),
                    "must be finite and >= 0");
  }
  return Status::Ok();
}

void SparseClickData::Append(const SparseClickData& other, size_t i) {
  if (row_offsets.empty()) row_offsets.push_back(0);
  feature_ids.insert(feature_ids.end(),
                     other.feature_ids.begin() + static_cast<ptrdiff_t>(other.row_offsets[i]),
                     other.feature_ids.begin() + static_cast<ptrdiff_t>(other.row_offsets[i + 1]));
  row_offsets.push_back(feature_ids.size());
  labels.push_back(other.labels[i]);
}

uint64_t FeatureIdOfPopularityRank(const SparseClickOptions& options, uint64_t k) {
  if (!options.scatter_feature_ids) return k;
  return Scatter(k, options.num_features, ScatterParams(options));
}

StatusOr<SparseClickData> GenerateSparseClicks(const SparseClickOptions& options, uint32_t rank,
                                               uint32_t num_ranks) {
  PS_RETURN_IF_ERROR(options.Validate());
  PS_RETURN_IF_ERROR(CheckRank("GenerateSparseClicks", rank, num_ranks));
  const uint64_t n = options.num_features;

  // Unnormalized Zipf CDF over popularity ranks; a draw is a binary search.
  std::vector<double> cdf(n);
  double total = 0;
  for (uint64_t k = 0; k < n; ++k) {
    total += std::pow(static_cast<double>(k + 1), -options.zipf_exponent);
    cdf[k] = total;
  }
  const auto scatter = ScatterParams(options);
  auto to_id = [&](uint64_t k) { return options.scatter_feature_ids ? Scatter(k, n, scatter) : k; };

  SparseClickData data;
  data.true_weights = TrueWeights(options);
  const RowRange local = ShardRows(options.num_samples, num_ranks, rank);
  data.range = {options.first_sample + local.begin, options.first_sample + local.end};
  data.row_offsets.reserve(data.range.size() + 1);
  data.row_offsets.push_back(0);
  data.labels.reserve(data.range.size());
  const uint32_t span = options.max_features - options.min_features + 1;

  std::vector<uint64_t> ids;
  for (uint64_t i = data.range.begin; i < data.range.end; ++i) {
    Stream s(options.seed, kSampleTag, i);
    const uint32_t count = options.min_features + static_cast<uint32_t>(s.Next() % span);
    ids.clear();
    // Distinct ids by rejection. A very skewed Zipf can make the last few
    // distinct draws rare; after a bounded number of tries the most popular
    // unused ranks fill the sample, which keeps the time per sample bounded.
    const uint64_t max_tries = 100ULL * count;
    for (uint64_t tries = 0; ids.size() < count && tries < max_tries; ++tries) {
      const double u = s.Uniform() * total;
      uint64_t k = static_cast<uint64_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      k = std::min(k, n - 1);  // u == total after rounding
      const uint64_t id = to_id(k);
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    for (uint64_t k = 0; ids.size() < count; ++k) {
      const uint64_t id = to_id(k);
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    double z = 0;
    for (uint64_t id : ids) z += data.true_weights[id];
    const double p = 1.0 / (1.0 + std::exp(-z));
    data.labels.push_back(s.Uniform() < p ? 1 : 0);
    data.feature_ids.insert(data.feature_ids.end(), ids.begin(), ids.end());
    data.row_offsets.push_back(data.feature_ids.size());
  }
  return data;
}

Status LowRankRatingsOptions::Validate() const {
  constexpr char kName[] = "LowRankRatingsOptions";
  if (num_users == 0) return BadField(kName, "num_users", "0", "must be >= 1");
  if (num_items == 0) return BadField(kName, "num_items", "0", "must be >= 1");
  if (rank == 0) return BadField(kName, "rank", "0", "must be >= 1");
  if (!(observe_probability > 0 && observe_probability <= 1)) {
    return BadField(kName, "observe_probability", std::to_string(observe_probability),
                    "must be in (0, 1]");
  }
  if (!(factor_stddev > 0) || !std::isfinite(factor_stddev)) {
    return BadField(kName, "factor_stddev", std::to_string(factor_stddev),
                    "must be finite and > 0");
  }
  if (!(noise_stddev >= 0) || !std::isfinite(noise_stddev)) {
    return BadField(kName, "noise_stddev", std::to_string(noise_stddev), "must be finite and >= 0");
  }
  return Status::Ok();
}

StatusOr<LowRankRatingsData> GenerateLowRankRatings(const LowRankRatingsOptions& options,
                                                    uint32_t rank, uint32_t num_ranks) {
  PS_RETURN_IF_ERROR(options.Validate());
  PS_RETURN_IF_ERROR(CheckRank("GenerateLowRankRatings", rank, num_ranks));
  const uint32_t k = options.rank;

  LowRankRatingsData data;
  data.users = ShardRows(options.num_users, num_ranks, rank);
  data.item_factors.resize(options.num_items * k);
  for (uint64_t v = 0; v < options.num_items; ++v) {
    Stream s(options.seed, kItemTag, v);
    for (uint32_t d = 0; d < k; ++d) {
      data.item_factors[v * k + d] = static_cast<float>(options.factor_stddev * s.Normal());
    }
  }
  data.user_factors.resize(data.users.size() * k);
  for (uint64_t u = data.users.begin; u < data.users.end; ++u) {
    Stream s(options.seed, kUserTag, u);
    float* row = data.user_factors.data() + (u - data.users.begin) * k;
    for (uint32_t d = 0; d < k; ++d)
      row[d] = static_cast<float>(options.factor_stddev * s.Normal());
  }

  // Observed items of a user by geometric skips: O(observed), not O(items).
  const double log_miss = std::log1p(-options.observe_probability);  // -inf when p == 1
  for (uint64_t u = data.users.begin; u < data.users.end; ++u) {
    Stream s(options.seed, kObserveTag, u);
    const float* uf = data.user_factors.data() + (u - data.users.begin) * k;
    uint64_t next = 0;  // first item not yet decided
    while (next < options.num_items) {
      // Items skipped before the next observed one: Geometric(p) failures.
      const double skip = options.observe_probability >= 1.0
                              ? 0.0
                              : std::floor(std::log1p(-s.Uniform()) / log_miss);
      if (!(skip < static_cast<double>(options.num_items - next))) break;
      const uint64_t item = next + static_cast<uint64_t>(skip);
      const float* vf = data.item_factors.data() + item * k;
      double dot = 0;
      for (uint32_t d = 0; d < k; ++d) dot += double{uf[d]} * vf[d];
      const double value = dot + options.noise_stddev * s.Normal();
      data.ratings.push_back(Rating{u, item, static_cast<float>(value)});
      next = item + 1;
    }
  }
  return data;
}

void SplitRatings(const std::vector<Rating>& all, double test_fraction, uint64_t seed,
                  std::vector<Rating>* train, std::vector<Rating>* test) {
  // A tag well apart from the StreamTag values, so the split is independent
  // of the generated ratings even under the generator's own seed.
  constexpr uint64_t kSplitTag = 0x5011'7000;
  train->clear();
  test->clear();
  for (const Rating& r : all) {
    // Mix is a bijection, so Mix(user + kGolden) ^ item differs between
    // (user, item) pairs except for rare 64-bit coincidences.
    Stream s(seed, kSplitTag, Mix(r.user + kGolden) ^ r.item);
    (s.Uniform() < test_fraction ? test : train)->push_back(r);
  }
}

}  // namespace ps
