#include "worker/models/sparse_logreg.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ps {
namespace {

Status BadBatch(const std::string& what) {
  return InvalidArgumentError("sparse logistic regression: " + what);
}

// log(1 + exp(-m)) without overflow for any margin m.
double LogLossOfMargin(double m) { return std::log1p(std::exp(-std::abs(m))) + std::max(-m, 0.0); }

// sigmoid(z) without overflow for any z.
double Sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

}  // namespace

void BatchFeatures(const SparseClickData& data, size_t first, size_t rows,
                   std::vector<uint64_t>* ids) {
  ids->clear();
  const size_t n = data.num_samples();
  if (first >= n || rows == 0) return;
  const size_t end = first + std::min(rows, n - first);
  ids->assign(data.feature_ids.begin() + static_cast<ptrdiff_t>(data.row_offsets[first]),
              data.feature_ids.begin() + static_cast<ptrdiff_t>(data.row_offsets[end]));
  std::sort(ids->begin(), ids->end());
  ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
}

StatusOr<double> SparseLogRegLossAndGradient(const SparseClickData& data, size_t first, size_t rows,
                                             std::span<const uint64_t> ids,
                                             std::span<const float> weights,
                                             std::span<float> grad) {
  const size_t n = data.num_samples();
  if (rows == 0) return BadBatch("empty batch (rows == 0)");
  if (first > n || rows > n - first) {
    return BadBatch("batch [" + std::to_string(first) + ", " + std::to_string(first) + " + " +
                    std::to_string(rows) + ") reaches past the " + std::to_string(n) +
                    " samples held");
  }
  if (data.row_offsets.size() != n + 1) {
    return BadBatch("data has " + std::to_string(data.row_offsets.size()) + " row offsets for " +
                    std::to_string(n) + " samples; expected samples + 1");
  }
  if (weights.size() != ids.size()) {
    return BadBatch(std::to_string(weights.size()) + " weights for " + std::to_string(ids.size()) +
                    " ids; pass one weight per id");
  }
  if (!grad.empty() && grad.size() != ids.size()) {
    return BadBatch("gradient of " + std::to_string(grad.size()) + " entries for " +
                    std::to_string(ids.size()) + " ids; pass one entry per id or none");
  }
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i - 1] >= ids[i]) {
      return BadBatch("ids are not sorted and distinct: ids[" + std::to_string(i - 1) +
                      "] = " + std::to_string(ids[i - 1]) + ", ids[" + std::to_string(i) +
                      "] = " + std::to_string(ids[i]));
    }
  }
  // Strictly increasing ids from 0 to size - 1 are exactly 0..size-1: a
  // dense weight vector, looked up directly.
  const bool dense = !ids.empty() && ids.front() == 0 && ids.back() == ids.size() - 1;

  const bool want_grad = !grad.empty();
  std::vector<double> g(want_grad ? ids.size() : 0, 0.0);
  std::vector<size_t> pos;  // positions in ids of the current sample's features
  double loss = 0;
  for (size_t s = first; s < first + rows; ++s) {
    pos.clear();
    double z = 0;
    for (uint64_t k = data.row_offsets[s]; k < data.row_offsets[s + 1]; ++k) {
      const uint64_t id = data.feature_ids[k];
      size_t i;
      if (dense) {
        i = static_cast<size_t>(id);
        if (id >= ids.size()) i = ids.size();
      } else {
        i = static_cast<size_t>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
        if (i < ids.size() && ids[i] != id) i = ids.size();
      }
      if (i == ids.size()) {
        return BadBatch("feature " + std::to_string(id) + " of sample " +
                        std::to_string(data.range.begin + s) +
                        " is missing from ids; pull every id of BatchFeatures");
      }
      z += weights[i];
      if (want_grad) pos.push_back(i);
    }
    const bool positive = data.labels[s] == 1;
    loss += LogLossOfMargin(positive ? z : -z);
    if (want_grad) {
      const double dz = Sigmoid(z) - (positive ? 1.0 : 0.0);  // d(loss) / dz
      for (size_t i : pos) g[i] += dz;
    }
  }
  const double inv_rows = 1.0 / static_cast<double>(rows);
  for (size_t i = 0; i < g.size(); ++i) grad[i] = static_cast<float>(g[i] * inv_rows);
  return loss * inv_rows;
}

StatusOr<double> SparseLogLoss(const SparseClickData& data, std::span<const uint64_t> ids,
                               std::span<const float> weights) {
  if (data.num_samples() == 0) return BadBatch("no samples to evaluate");
  return SparseLogRegLossAndGradient(data, 0, data.num_samples(), ids, weights, {});
}

}  // namespace ps
