#include "worker/models/ctr.h"

#include <algorithm>
#include <string>

namespace ps {

void BatchIds(const CtrData& data, size_t first, size_t rows, std::vector<uint64_t>* ids) {
  const size_t end = std::min(first + rows, data.num_samples());
  ids->assign(data.ids.begin() + static_cast<ptrdiff_t>(std::min(first, end) * data.fields),
              data.ids.begin() + static_cast<ptrdiff_t>(end * data.fields));
  std::sort(ids->begin(), ids->end());
  ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
}

std::vector<uint32_t> CtrModel::Layers(uint32_t fields, uint32_t dense, uint32_t embedding_dim,
                                       std::span<const uint32_t> hidden) {
  std::vector<uint32_t> layers = {fields * embedding_dim + dense};
  layers.insert(layers.end(), hidden.begin(), hidden.end());
  layers.push_back(1);
  return layers;
}

StatusOr<std::unique_ptr<CtrModel>> CtrModel::Create(Backend* backend, uint32_t fields,
                                                     uint32_t dense, uint32_t embedding_dim,
                                                     std::vector<uint32_t> hidden,
                                                     uint32_t max_batch) {
  if (fields == 0 || embedding_dim == 0 || max_batch == 0) {
    return InvalidArgumentError("CTR model: fields, embedding dim and max_batch must be >= 1");
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Mlp> mlp,
                      Mlp::Create(backend, Layers(fields, dense, embedding_dim, hidden),
                                  max_batch));
  std::unique_ptr<CtrModel> model(
      new CtrModel(fields, dense, embedding_dim, max_batch, std::move(mlp)));
  const size_t inputs = size_t{max_batch} * (size_t{fields} * embedding_dim + dense);
  model->inputs_.resize(inputs);
  model->input_grad_.resize(inputs);
  model->positions_.resize(size_t{max_batch} * fields);
  return model;
}

Status CtrModel::Gather(const CtrData& data, size_t first, size_t rows,
                        std::span<const uint64_t> ids, std::span<const float> embeddings) {
  if (data.fields != fields_ || data.dense != dense_) {
    return InvalidArgumentError("CTR model: data of " + std::to_string(data.fields) +
                                " fields and " + std::to_string(data.dense) +
                                " dense features for a model of " + std::to_string(fields_) +
                                " and " + std::to_string(dense_));
  }
  if (rows == 0 || rows > max_batch_ || first > data.num_samples() ||
      rows > data.num_samples() - first) {
    return InvalidArgumentError("CTR model: samples [" + std::to_string(first) + ", +" +
                                std::to_string(rows) + ") of " +
                                std::to_string(data.num_samples()) + " in batches of 1.." +
                                std::to_string(max_batch_));
  }
  if (embeddings.size() != ids.size() * dim_) {
    return InvalidArgumentError("CTR model: " + std::to_string(embeddings.size()) +
                                " embedding floats for " + std::to_string(ids.size()) +
                                " ids of dim " + std::to_string(dim_));
  }
  if (std::adjacent_find(ids.begin(), ids.end(), std::greater_equal<>()) != ids.end()) {
    return InvalidArgumentError("CTR model: ids must be strictly increasing (BatchIds)");
  }
  const size_t width = size_t{fields_} * dim_ + dense_;
  for (size_t r = 0; r < rows; ++r) {
    float* input = inputs_.data() + r * width;
    for (uint32_t f = 0; f < fields_; ++f) {
      const uint64_t id = data.ids[(first + r) * fields_ + f];
      const auto at = std::lower_bound(ids.begin(), ids.end(), id);
      if (at == ids.end() || *at != id) {
        return InvalidArgumentError("CTR model: id " + std::to_string(id) + " of sample " +
                                    std::to_string(first + r) + " is not among the pulled ids");
      }
      const auto position = static_cast<uint32_t>(at - ids.begin());
      positions_[r * fields_ + f] = position;
      std::copy_n(embeddings.data() + size_t{position} * dim_, dim_, input + size_t{f} * dim_);
    }
    std::copy_n(data.dense_values.data() + (first + r) * dense_, dense_,
                input + size_t{fields_} * dim_);
  }
  return Status::Ok();
}

StatusOr<float> CtrModel::TrainStep(const CtrData& data, size_t first, size_t rows,
                                    std::span<const uint64_t> ids,
                                    std::span<const float> embeddings,
                                    std::span<const float> params,
                                    std::span<float> embedding_grad,
                                    std::span<float> params_grad) {
  if (embedding_grad.size() != embeddings.size()) {
    return InvalidArgumentError("CTR model: an embedding gradient of " +
                                std::to_string(embedding_grad.size()) + " floats for " +
                                std::to_string(embeddings.size()) + " embedding floats");
  }
  PS_RETURN_IF_ERROR(Gather(data, first, rows, ids, embeddings));
  const size_t width = size_t{fields_} * dim_ + dense_;
  const std::span<const float> x(inputs_.data(), rows * width);
  const std::span<float> dx(input_grad_.data(), rows * width);
  PS_ASSIGN_OR_RETURN(
      float loss, mlp_->TrainStep(x, {data.labels.data() + first, rows}, params, params_grad, dx));
  std::fill(embedding_grad.begin(), embedding_grad.end(), 0.0f);
  for (size_t r = 0; r < rows; ++r) {
    for (uint32_t f = 0; f < fields_; ++f) {
      const float* from = dx.data() + r * width + size_t{f} * dim_;
      float* to = embedding_grad.data() + size_t{positions_[r * fields_ + f]} * dim_;
      for (uint32_t k = 0; k < dim_; ++k) to[k] += from[k];
    }
  }
  return loss;
}

Status CtrModel::SetParameters(std::span<const float> params) {
  return mlp_->SetParameters(params);
}

Status CtrModel::Logits(const CtrData& data, std::span<const uint64_t> ids,
                        std::span<const float> embeddings, std::span<float> out) {
  if (out.size() != data.num_samples()) {
    return InvalidArgumentError("CTR model: " + std::to_string(out.size()) + " logits for " +
                                std::to_string(data.num_samples()) + " samples");
  }
  const size_t width = size_t{fields_} * dim_ + dense_;
  for (size_t first = 0; first < data.num_samples(); first += max_batch_) {
    const size_t rows = std::min<size_t>(max_batch_, data.num_samples() - first);
    PS_RETURN_IF_ERROR(Gather(data, first, rows, ids, embeddings));
    PS_RETURN_IF_ERROR(mlp_->Logits({inputs_.data(), rows * width}, out.subspan(first, rows)));
  }
  return Status::Ok();
}

}  // namespace ps
