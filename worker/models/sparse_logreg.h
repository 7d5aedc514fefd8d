// Sparse logistic regression on binary features (the click-like data of
// worker/data/generators.h): a sample with feature ids S has
// p(label = 1) = sigmoid(sum of w_j over j in S), with no bias term, and the
// loss is the mean log-loss of a batch.
//
// Weights travel as the rows a worker pulls for a batch: `ids` is a sorted
// list of distinct feature ids and weights[i] is the weight of ids[i]; the
// gradient uses the same layout, ready to push. When ids is 0..n-1 (a dense
// weight vector) the lookup is direct; otherwise it is a binary search.
//
// The model runs on a compute backend (worker/backend.h). The host keeps the
// bookkeeping: it checks the arguments and writes the batch as a binary
// sparse matrix X (samples x pulled ids, CSR) whose columns are positions in
// `ids`. The backend gets the pulled weights w and computes the logits
// z = X w (CsrMatVec), the mean log-loss and dz = (sigmoid(z) - y) / rows
// (LogisticLoss), and the gradient X^T dz (transposed CsrMatVec), which is
// downloaded into the caller's span. The loss is a float from the backend.
// Regularization (L2, optional L1) is not applied here: the server's update
// rule (the table's optimizer) applies it to the rows it updates, so the
// gradient below is of the data term alone.
//
// Thread-compatible (it reuses host and backend buffers between calls);
// `backend` must outlive the model.
#ifndef PS_WORKER_MODELS_SPARSE_LOGREG_H_
#define PS_WORKER_MODELS_SPARSE_LOGREG_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/backend.h"
#include "worker/data/generators.h"

namespace ps {

// Replaces *ids with the sorted distinct feature ids of the local samples
// [first, first + rows) of `data`: the rows a worker pulls for that batch.
// A range reaching past the data is cut at its end.
void BatchFeatures(const SparseClickData& data, size_t first, size_t rows,
                   std::vector<uint64_t>* ids);

class SparseLogReg {
 public:
  // A model on `backend`; its buffers grow with the batches it sees.
  // InvalidArgument for a null backend.
  static StatusOr<std::unique_ptr<SparseLogReg>> Create(Backend* backend);

  // Mean log-loss of the local samples [first, first + rows) at the weights
  // (ids, weights). If `grad` is not empty, writes
  // grad[i] = d(mean loss) / d(weights[i]); ids outside the batch get 0.
  // InvalidArgument when rows == 0, first + rows > data.num_samples(), ids
  // is not strictly increasing, weights.size() != ids.size(), grad is neither
  // empty nor ids.size() long, a batch feature is missing from ids, or a
  // label is neither 0 nor 1. On error the contents of grad are unspecified.
  StatusOr<float> LossAndGradient(const SparseClickData& data, size_t first, size_t rows,
                                  std::span<const uint64_t> ids, std::span<const float> weights,
                                  std::span<float> grad);

  // Mean log-loss of every sample of `data` (e.g. a held-out test set), with
  // the conventions and errors of LossAndGradient; InvalidArgument for empty
  // data.
  StatusOr<float> LogLoss(const SparseClickData& data, std::span<const uint64_t> ids,
                          std::span<const float> weights);

 private:
  explicit SparseLogReg(Backend* backend) : backend_(backend) {}
  // Checks the arguments and fills offsets_ / columns_ with the batch's CSR.
  Status BuildBatch(const SparseClickData& data, size_t first, size_t rows,
                    std::span<const uint64_t> ids, std::span<const float> weights,
                    std::span<float> grad);

  Backend* const backend_;
  std::vector<uint64_t> offsets_;          // rows + 1 CSR row offsets, from 0
  std::vector<uint32_t> columns_;          // positions in ids of the batch's features
  std::unique_ptr<DeviceBuffer> weights_;  // the pulled weights
  std::unique_ptr<DeviceBuffer> logits_;   // z, then dz in place
  std::unique_ptr<DeviceBuffer> grad_;     // X^T dz, one per pulled id
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_SPARSE_LOGREG_H_
