// Seeded synthetic workloads for the workers: sparse click-like data for
// sparse logistic regression and low-rank ratings for matrix factorization.
//
// Determinism: every random quantity is a pure function of (seed, what, index)
// through a counter-based hash (SplitMix64), never of a standard-library
// distribution, so output does not depend on the rank count, the compiler or
// the standard library (only on libm's exp/log/cos, which agree on glibc). Partition: rank r of M
// gets the CONTIGUOUS block ShardRows(N, M, r) (common/key_range.h) of samples (clicks, shifted
// by SparseClickOptions::first_sample) or users (ratings); the blocks of all ranks concatenated
// equal the M = 1 data exactly. All functions are thread-safe (no shared state).
#ifndef PS_WORKER_DATA_GENERATORS_H_
#define PS_WORKER_DATA_GENERATORS_H_

#include <cstdint>
#include <vector>

#include "common/key_range.h"
#include "common/status.h"

namespace ps {

// InvalidArgument naming `what` unless num_ranks >= 1 and rank < num_ranks:
// the partition check of every generator and reader of training data.
Status CheckRank(const char* what, uint32_t rank, uint32_t num_ranks);

struct SparseClickOptions {
  // Feature ids are 0..num_features-1. Default 10^6.
  uint64_t num_features = 1'000'000;
  // Samples in the whole data set (all ranks together).
  uint64_t num_samples = 100'000;
  // Global index of the data set's sample 0: the set holds samples
  // [first_sample, first_sample + num_samples). A sample is a pure function
  // of (seed, global index), so a held-out test set with the same true weights
  // is these options with first_sample = the training set's num_samples (fresh
  // draws). first_sample + num_samples must not exceed 2^64 - 1.
  uint64_t first_sample = 0;
  // Feature popularity ~ 1 / (popularity_rank + 1)^zipf_exponent. > 0.
  double zipf_exponent = 1.1;
  // Each sample holds a uniform number of distinct features in
  // [min_features, max_features]. 1 <= min <= max <= num_features / 2.
  uint32_t min_features = 10;
  uint32_t max_features = 50;
  // Fraction of features whose true weight is nonzero, in (0, 1]; 1 = dense.
  double weight_density = 0.2;
  // Nonzero true weights ~ Normal(0, weight_stddev). >= 0.
  double weight_stddev = 1.0;
  // When true, popularity rank k maps to a scattered feature id (a fixed
  // bijection, FeatureIdOfPopularityRank) so hot features spread over every
  // key-range shard; when false feature id == popularity rank, which puts all
  // hot keys on shard 0.
  bool scatter_feature_ids = true;
  uint64_t seed = 1;

  // InvalidArgument naming the field for any impossible value above.
  Status Validate() const;
};

// One rank's samples, CSR layout. Features are binary (x_j = 1 when j is
// listed), so w.x is the sum of w over a sample's ids.
struct SparseClickData {
  // num_samples() + 1 offsets into feature_ids; sample i lists
  // feature_ids[row_offsets[i] .. row_offsets[i+1]), sorted, distinct.
  std::vector<uint64_t> row_offsets;
  std::vector<uint64_t> feature_ids;
  // 0 or 1, drawn as Bernoulli(sigmoid(w_true . x)).
  std::vector<int32_t> labels;
  // The generating weights, dense, num_features long (identical on all ranks).
  std::vector<float> true_weights;
  // Global indices of the samples held here (they include
  // options.first_sample): local sample i is global sample range.begin + i.
  RowRange range;

  size_t num_samples() const { return labels.size(); }
  // Appends local sample i of `other` (not its range or true weights).
  void Append(const SparseClickData& other, size_t i);
  // Removes every sample.
  void ClearSamples() {
    row_offsets.assign(1, 0);
    feature_ids.clear();
    labels.clear();
  }
};

// Generates rank `rank`'s share of the data set described by `options`: the
// samples first_sample + ShardRows(num_samples, num_ranks, rank).
// InvalidArgument when options.Validate() fails or rank >= num_ranks or
// num_ranks == 0.
StatusOr<SparseClickData> GenerateSparseClicks(const SparseClickOptions& options, uint32_t rank,
                                               uint32_t num_ranks);

// The feature id of popularity rank `k` (0 = most frequent).
// REQUIRES: options.Validate().ok(), k < options.num_features.
uint64_t FeatureIdOfPopularityRank(const SparseClickOptions& options, uint64_t k);

struct LowRankRatingsOptions {
  uint64_t num_users = 10'000;
  uint64_t num_items = 5'000;
  // Rank k of the true factors. >= 1.
  uint32_t rank = 10;
  // Each (user, item) entry is observed independently with this probability,
  // in (0, 1].
  double observe_probability = 0.01;
  // Factor entries ~ Normal(0, factor_stddev); the clean rating u.v then has
  // variance rank * factor_stddev^4. > 0.
  double factor_stddev = 0.5;
  // rating = u.v + Normal(0, noise_stddev). >= 0.
  double noise_stddev = 0.1;
  uint64_t seed = 1;

  // InvalidArgument naming the field for any impossible value above.
  Status Validate() const;
};

struct Rating {
  uint64_t user = 0;
  uint64_t item = 0;
  float value = 0;
};

// One rank's share: its users and all their observed ratings.
struct LowRankRatingsData {
  // Sorted by (user, item).
  std::vector<Rating> ratings;
  // The users held here.
  RowRange users;
  // True factors of the users held here: users.size() x rank, row-major
  // (row i is user users.begin + i).
  std::vector<float> user_factors;
  // True factors of every item: num_items x rank (identical on all ranks).
  std::vector<float> item_factors;
};

// Generates rank `rank`'s share. InvalidArgument when options.Validate()
// fails or rank >= num_ranks or num_ranks == 0.
StatusOr<LowRankRatingsData> GenerateLowRankRatings(const LowRankRatingsOptions& options,
                                                    uint32_t rank, uint32_t num_ranks);

// A deterministic held-out split: rating (user, item) goes to `test` when a
// hash of (seed, user, item) mapped to [0, 1) falls below test_fraction, else
// to `train`. The choice for a rating depends only on (seed, user, item), not
// on its position or the rank count, so splitting each rank's share and
// concatenating equals splitting the whole. Both outputs keep the input order;
// they are cleared first. REQUIRES: test_fraction in [0, 1), train and test
// non-null and distinct from `all`.
void SplitRatings(const std::vector<Rating>& all, double test_fraction, uint64_t seed,
                  std::vector<Rating>* train, std::vector<Rating>* test);

}  // namespace ps

#endif  // PS_WORKER_DATA_GENERATORS_H_
