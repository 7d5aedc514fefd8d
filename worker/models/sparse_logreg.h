// Sparse logistic regression on binary features (the click-like data of
// worker/data/generators.h): a sample with feature ids S has
// p(label = 1) = sigmoid(sum of w_j over j in S), with no bias term, and the
// loss is the mean log-loss of a batch.
//
// The model runs on the CPU, not on the Backend interface (worker/backend.h):
// per sample it gathers ~10-50 floats and does one sigmoid, so the work is a
// sparse gather with almost no arithmetic, and a device round trip (upload the
// batch and the pulled rows, download the gradient) would cost more than the
// computation itself. Regularization (L2, optional L1) is not applied here:
// the server's update rule (the table's optimizer) applies it to the rows it
// updates, so the gradient below is of the data term alone.
//
// Weights travel as the rows a worker pulls for a batch: `ids` is a sorted
// list of distinct feature ids and weights[i] is the weight of ids[i]; the
// gradient uses the same layout, ready to push. When ids is 0..n-1 (a dense
// weight vector) the lookup is direct; otherwise it is a binary search.
//
// All functions are pure and thread-safe.
#ifndef PS_WORKER_MODELS_SPARSE_LOGREG_H_
#define PS_WORKER_MODELS_SPARSE_LOGREG_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/data/generators.h"

namespace ps {

// Replaces *ids with the sorted distinct feature ids of the local samples
// [first, first + rows) of `data`: the rows a worker pulls for that batch.
// A range reaching past the data is cut at its end.
void BatchFeatures(const SparseClickData& data, size_t first, size_t rows,
                   std::vector<uint64_t>* ids);

// Mean log-loss of the local samples [first, first + rows) at the weights
// (ids, weights), computed in double. If `grad` is not empty, writes
// grad[i] = d(mean loss) / d(weights[i]); ids outside the batch get 0.
// InvalidArgument when rows == 0, first + rows > data.num_samples(), ids is
// not strictly increasing, weights.size() != ids.size(), grad is neither empty
// nor ids.size() long, or a batch feature is missing from ids. On error the
// contents of grad are unspecified.
StatusOr<double> SparseLogRegLossAndGradient(const SparseClickData& data, size_t first, size_t rows,
                                             std::span<const uint64_t> ids,
                                             std::span<const float> weights, std::span<float> grad);

// Mean log-loss of every sample of `data` (e.g. a held-out test set), with the
// conventions and errors of SparseLogRegLossAndGradient; InvalidArgument for
// empty data.
StatusOr<double> SparseLogLoss(const SparseClickData& data, std::span<const uint64_t> ids,
                               std::span<const float> weights);

}  // namespace ps

#endif  // PS_WORKER_MODELS_SPARSE_LOGREG_H_
