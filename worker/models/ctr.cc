#include "worker/models/ctr.h"

#include <algorithm>
#include <string>

namespace ps {

void BatchIds(const CtrData& data, size_t first, size_t rows, std::vector<uint64_t>* ids) {
  const size_t end = std::min(first + rows, data.num_samples());
  ids->assign(data.ids.begin() + static_cast<ptrdiff_t>(data.IdsBegin(std::min(first, end))),
              data.ids.begin() + static_cast<ptrdiff_t>(data.IdsBegin(end)));
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
  model->positions_.reserve(size_t{max_batch} * fields);
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
  const bool offsets_fit =
      data.has_bags() ? data.offsets.size() == data.num_samples() + 1 &&
                            data.offsets.front() == 0 && data.offsets.back() == data.ids.size() &&
                            std::is_sorted(data.offsets.begin() + static_cast<ptrdiff_t>(first),
                                           data.offsets.begin() +
                                               static_cast<ptrdiff_t>(first + rows + 1))
                      : data.ids.size() == data.num_samples() * data.fields;
  if (!offsets_fit) {
    return InvalidArgumentError(
        "CTR model: data of " + std::to_string(data.num_samples()) + " samples holds " +
        std::to_string(data.ids.size()) + " ids and " + std::to_string(data.offsets.size()) +
        " offsets; expected fields ids a sample without offsets, or samples + 1 offsets from 0 "
        "to the ids, never decreasing");
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
  positions_.clear();
  for (size_t r = 0; r < rows; ++r) {
    float* input = inputs_.data() + r * width;
    // A field's first id copies its embedding and the others add to it; a
    // field no id names (an empty bag) is zeros. The fields below `next`
    // are written.
    uint32_t next = 0;
    for (const uint64_t id : data.SampleIds(first + r)) {
      const uint32_t f = CtrField(id);
      if (f >= fields_ || f + 1 < next) {
        return InvalidArgumentError(
            "CTR model: id " + std::to_string(id) + " of sample " + std::to_string(first + r) +
            " names field " + std::to_string(f) +
            (f >= fields_ ? " of a model of " + std::to_string(fields_) + " fields"
                          : " after an id of field " + std::to_string(next - 1) +
                                "; a sample's ids must be in field order"));
      }
      const auto at = std::lower_bound(ids.begin(), ids.end(), id);
      if (at == ids.end() || *at != id) {
        return InvalidArgumentError("CTR model: id " + std::to_string(id) + " of sample " +
                                    std::to_string(first + r) + " is not among the pulled ids");
      }
      const auto position = static_cast<uint32_t>(at - ids.begin());
      positions_.push_back(position);
      const float* from = embeddings.data() + size_t{position} * dim_;
      float* to = input + size_t{f} * dim_;
      if (f + 1 == next) {
        for (uint32_t k = 0; k < dim_; ++k) to[k] += from[k];
        continue;
      }
      std::fill(input + size_t{next} * dim_, to, 0.0f);
      std::copy_n(from, dim_, to);
      next = f + 1;
    }
    std::fill(input + size_t{next} * dim_, input + size_t{fields_} * dim_, 0.0f);
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
  const uint32_t* position = positions_.data();
  for (size_t r = 0; r < rows; ++r) {
    for (const uint64_t id : data.SampleIds(first + r)) {
      const float* from = dx.data() + r * width + size_t{CtrField(id)} * dim_;
      float* to = embedding_grad.data() + size_t{*position++} * dim_;
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
