#include "worker/models/sparse_logreg.h"

#include <algorithm>
#include <limits>
#include <string>

namespace ps {
namespace {

Status BadBatch(const std::string& what) {
  return InvalidArgumentError("sparse logistic regression: " + what);
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

StatusOr<std::unique_ptr<SparseLogReg>> SparseLogReg::Create(Backend* backend) {
  if (backend == nullptr) return BadBatch("the backend is null");
  return std::unique_ptr<SparseLogReg>(new SparseLogReg(backend));
}

Status SparseLogReg::BuildBatch(const SparseClickData& data, size_t first, size_t rows,
                                std::span<const uint64_t> ids, std::span<const float> weights,
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
  if (ids.size() > std::numeric_limits<uint32_t>::max()) {
    return BadBatch(std::to_string(ids.size()) + " ids; at most 2^32 - 1 fit a batch");
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

  const uint64_t base = data.row_offsets[first];
  offsets_.resize(rows + 1);
  columns_.resize(data.row_offsets[first + rows] - base);
  offsets_[0] = 0;
  for (size_t s = first; s < first + rows; ++s) {
    for (uint64_t k = data.row_offsets[s]; k < data.row_offsets[s + 1]; ++k) {
      const uint64_t id = data.feature_ids[k];
      size_t i;
      if (dense) {
        i = id < ids.size() ? static_cast<size_t>(id) : ids.size();
      } else {
        i = static_cast<size_t>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
        if (i < ids.size() && ids[i] != id) i = ids.size();
      }
      if (i == ids.size()) {
        return BadBatch("feature " + std::to_string(id) + " of sample " +
                        std::to_string(data.range.begin + s) +
                        " is missing from ids; pull every id of BatchFeatures");
      }
      columns_[k - base] = static_cast<uint32_t>(i);
    }
    offsets_[s - first + 1] = data.row_offsets[s + 1] - base;
  }
  return Status::Ok();
}

StatusOr<float> SparseLogReg::LossAndGradient(const SparseClickData& data, size_t first,
                                              size_t rows, std::span<const uint64_t> ids,
                                              std::span<const float> weights,
                                              std::span<float> grad) {
  PS_RETURN_IF_ERROR(BuildBatch(data, first, rows, ids, weights, grad));
  const size_t num_ids = ids.size();
  PS_RETURN_IF_ERROR(GrowBuffer(backend_, num_ids, &weights_));
  PS_RETURN_IF_ERROR(GrowBuffer(backend_, rows, &logits_));
  PS_RETURN_IF_ERROR(backend_->Upload(weights.data(), num_ids, weights_.get()));
  // z = X w, one logit per sample.
  PS_RETURN_IF_ERROR(backend_->CsrMatVec(Transpose::kNo, rows, num_ids, offsets_.data(),
                                         columns_.data(), *weights_, logits_.get()));
  const bool want_grad = !grad.empty();
  float loss = 0;
  // dz = (sigmoid(z) - y) / rows overwrites z.
  PS_RETURN_IF_ERROR(backend_->LogisticLoss(rows, *logits_, data.labels.data() + first,
                                            want_grad ? logits_.get() : nullptr, &loss));
  if (!want_grad) {
    PS_RETURN_IF_ERROR(backend_->Synchronize());  // writes the loss
    return loss;
  }
  // d(loss) / dw = X^T dz: each pulled weight sums the dz of the samples
  // that use it (0 for ids outside the batch).
  PS_RETURN_IF_ERROR(GrowBuffer(backend_, num_ids, &grad_));
  PS_RETURN_IF_ERROR(backend_->CsrMatVec(Transpose::kYes, rows, num_ids, offsets_.data(),
                                         columns_.data(), *logits_, grad_.get()));
  PS_RETURN_IF_ERROR(backend_->Download(*grad_, grad.data(), num_ids));  // and the loss
  return loss;
}

StatusOr<float> SparseLogReg::LogLoss(const SparseClickData& data, std::span<const uint64_t> ids,
                                      std::span<const float> weights) {
  if (data.num_samples() == 0) return BadBatch("no samples to evaluate");
  return LossAndGradient(data, 0, data.num_samples(), ids, weights, {});
}

}  // namespace ps
