// A click-through-rate model (the ctr program, worker/ctr_training.h) over
// CtrData (worker/data/ctr_data.h): each id of a sample looks up an
// embedding of dim E in a hashed table, and each of its F fields is one
// embedding: its id's, or for a bag field the sum of its ids' embeddings
// (an embedding bag; zeros for an empty bag). The F field embeddings and
// the sample's D dense features, concatenated, are the input of an MLP
// (worker/models/mlp.h) with ReLU hidden layers and one logistic output,
// p(click) = sigmoid(output); the loss is the mean log-loss of a batch.
//
// Embeddings travel as the rows a worker pulls for a batch: `ids` is the
// sorted list of the batch's distinct ids (BatchIds) and embeddings holds
// ids.size() x E floats in that order; their gradient has the same layout,
// ready to push. Each id of a field receives the field's input gradient
// (the gradient of a sum), and an id used several times (by several
// samples, or twice in one bag) receives the sum of its uses.
// The MLP's parameters are one flat vector (Mlp's layout), a dense table.
//
// The host gathers (and sums) each sample's embeddings and dense features
// into the MLP's input and adds the input's gradient into the embeddings'
// gradient; the MLP runs on the compute backend.
//
// Thread-compatible (it reuses its buffers between calls); `backend` must
// outlive the model.
#ifndef PS_WORKER_MODELS_CTR_H_
#define PS_WORKER_MODELS_CTR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/backend.h"
#include "worker/data/ctr_data.h"
#include "worker/models/mlp.h"

namespace ps {

// Replaces *ids with the sorted distinct ids of the samples [first, first +
// rows) of `data` (every value of their bags). A range reaching past the
// data is cut at its end.
void BatchIds(const CtrData& data, size_t first, size_t rows, std::vector<uint64_t>* ids);

class CtrModel {
 public:
  // The MLP's layer sizes: fields * embedding_dim + dense inputs, `hidden`,
  // then 1.
  static std::vector<uint32_t> Layers(uint32_t fields, uint32_t dense, uint32_t embedding_dim,
                                      std::span<const uint32_t> hidden);

  // A model for data of `fields` and `dense`, on batches of up to
  // `max_batch` samples. InvalidArgument for zero fields, embedding_dim or
  // max_batch, or a zero hidden size.
  static StatusOr<std::unique_ptr<CtrModel>> Create(Backend* backend, uint32_t fields,
                                                    uint32_t dense, uint32_t embedding_dim,
                                                    std::vector<uint32_t> hidden,
                                                    uint32_t max_batch);

  // The MLP's parameter count (its dense table's rows).
  size_t num_parameters() const { return mlp_->num_parameters(); }

  // The mean log-loss of the samples [first, first + rows) of `data` at
  // the embeddings (ids, embeddings) and the MLP parameters `params`, and
  // its gradient: embedding_grad (ids.size() x E; an id the batch does not
  // use gets 0) and params_grad (num_parameters()). InvalidArgument when
  // rows is 0 or above max_batch, the samples run past the data, the data's
  // fields or dense differ from the model's, ids is not strictly increasing,
  // a sample's id is missing from ids, a sample's ids are not in field
  // order or name a field past the model's, or a span has the wrong size.
  StatusOr<float> TrainStep(const CtrData& data, size_t first, size_t rows,
                            std::span<const uint64_t> ids, std::span<const float> embeddings,
                            std::span<const float> params, std::span<float> embedding_grad,
                            std::span<float> params_grad);

  // The MLP parameters Logits uses (num_parameters() floats).
  Status SetParameters(std::span<const float> params);

  // The logits of every sample of `data` into `out` (num_samples() floats),
  // at the parameters of SetParameters, in batches of up to max_batch.
  // Errors: TrainStep's.
  Status Logits(const CtrData& data, std::span<const uint64_t> ids,
                std::span<const float> embeddings, std::span<float> out);

 private:
  CtrModel(uint32_t fields, uint32_t dense, uint32_t dim, uint32_t max_batch,
           std::unique_ptr<Mlp> mlp)
      : fields_(fields), dense_(dense), dim_(dim), max_batch_(max_batch), mlp_(std::move(mlp)) {}
  // Checks the batch and writes its MLP input into inputs_ and the position
  // in ids of each of its samples' ids into positions_ (in data.ids order
  // from the batch's first id).
  Status Gather(const CtrData& data, size_t first, size_t rows, std::span<const uint64_t> ids,
                std::span<const float> embeddings);

  const uint32_t fields_, dense_, dim_, max_batch_;
  const std::unique_ptr<Mlp> mlp_;
  std::vector<float> inputs_, input_grad_;
  std::vector<uint32_t> positions_;
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_CTR_H_
