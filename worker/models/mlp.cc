#include "worker/models/mlp.h"

#include <algorithm>

namespace ps {

StatusOr<std::unique_ptr<Mlp>> Mlp::Create(Backend* backend, std::vector<uint32_t> layers,
                                           uint32_t max_batch) {
  if (layers.size() < 2 || max_batch == 0 ||
      std::find(layers.begin(), layers.end(), 0u) != layers.end()) {
    return InvalidArgumentError(
        "an MLP needs at least 2 layer sizes (inputs, classes), each >= 1, and max_batch >= 1");
  }
  std::unique_ptr<Mlp> m(new Mlp(backend, std::move(layers), max_batch));
  PS_ASSIGN_OR_RETURN(m->x_, backend->Allocate(size_t{max_batch} * m->layers_[0]));
  for (size_t l = 1; l < m->layers_.size(); ++l) {
    Layer layer;
    layer.in = m->layers_[l - 1];
    layer.out = m->layers_[l];
    layer.offset = m->num_parameters_;
    const size_t wsize = size_t{layer.in} * layer.out;
    m->num_parameters_ += wsize + layer.out;
    PS_ASSIGN_OR_RETURN(layer.w, backend->Allocate(wsize));
    PS_ASSIGN_OR_RETURN(layer.b, backend->Allocate(layer.out));
    PS_ASSIGN_OR_RETURN(layer.a, backend->Allocate(size_t{max_batch} * layer.out));
    PS_ASSIGN_OR_RETURN(layer.dz, backend->Allocate(size_t{max_batch} * layer.out));
    PS_ASSIGN_OR_RETURN(layer.dw, backend->Allocate(wsize));
    PS_ASSIGN_OR_RETURN(layer.db, backend->Allocate(layer.out));
    m->net_.push_back(std::move(layer));
  }
  return m;
}

Status Mlp::SetParameters(std::span<const float> params) {
  if (params.size() != num_parameters_) {
    return InvalidArgumentError("MLP: got " + std::to_string(params.size()) +
                                " parameters, expected " + std::to_string(num_parameters_));
  }
  for (Layer& l : net_) {
    const size_t wsize = size_t{l.in} * l.out;
    PS_RETURN_IF_ERROR(backend_->Upload(params.data() + l.offset, wsize, l.w.get()));
    PS_RETURN_IF_ERROR(backend_->Upload(params.data() + l.offset + wsize, l.out, l.b.get()));
  }
  return Status::Ok();
}

Status Mlp::CheckBatch(std::span<const float> x, std::span<const int32_t> labels) const {
  const size_t rows = labels.size();
  if (rows == 0 || rows > max_batch_) {
    return InvalidArgumentError("MLP: batch of " + std::to_string(rows) + " rows; expected 1.." +
                                std::to_string(max_batch_));
  }
  if (x.size() != rows * layers_[0]) {
    return InvalidArgumentError("MLP: " + std::to_string(x.size()) + " inputs for " +
                                std::to_string(rows) + " rows of " + std::to_string(layers_[0]) +
                                " features");
  }
  return Status::Ok();
}

Status Mlp::Forward(std::span<const float> x, size_t rows) {
  PS_RETURN_IF_ERROR(backend_->Upload(x.data(), x.size(), x_.get()));
  const DeviceBuffer* input = x_.get();
  for (size_t i = 0; i < net_.size(); ++i) {
    Layer& l = net_[i];
    PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kNo, Transpose::kNo, rows, l.out, l.in, 1.0f,
                                      *input, *l.w, 0.0f, l.a.get()));
    PS_RETURN_IF_ERROR(backend_->AddBias(rows, l.out, *l.b, l.a.get()));
    if (i + 1 < net_.size()) PS_RETURN_IF_ERROR(backend_->Relu(rows * l.out, l.a.get()));
    input = l.a.get();
  }
  return Status::Ok();
}

StatusOr<float> Mlp::LossAndGradient(std::span<const float> x, std::span<const int32_t> labels,
                                     std::span<float> grad) {
  PS_RETURN_IF_ERROR(CheckBatch(x, labels));
  if (!grad.empty() && grad.size() != num_parameters_) {
    return InvalidArgumentError("MLP: gradient buffer of " + std::to_string(grad.size()) +
                                " floats, expected " + std::to_string(num_parameters_));
  }
  const size_t rows = labels.size();
  PS_RETURN_IF_ERROR(Forward(x, rows));
  Layer& top = net_.back();
  float loss = 0;
  PS_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropy(rows, top.out, *top.a, labels.data(),
                                                   top.a.get(),
                                                   grad.empty() ? nullptr : top.dz.get(), &loss));
  if (grad.empty()) return loss;
  for (size_t i = net_.size(); i-- > 0;) {
    Layer& l = net_[i];
    const DeviceBuffer& input = i == 0 ? *x_ : *net_[i - 1].a;
    // dW = input^T dz, db = column sums of dz.
    PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kYes, Transpose::kNo, l.in, l.out, rows, 1.0f,
                                      input, *l.dz, 0.0f, l.dw.get()));
    PS_RETURN_IF_ERROR(backend_->SumRows(rows, l.out, *l.dz, l.db.get()));
    if (i > 0) {
      // dz of the layer below = (dz W^T) where its ReLU output was positive.
      Layer& below = net_[i - 1];
      PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kNo, Transpose::kYes, rows, l.in, l.out, 1.0f,
                                        *l.dz, *l.w, 0.0f, below.dz.get()));
      PS_RETURN_IF_ERROR(backend_->ReluBackward(rows * l.in, *below.a, below.dz.get()));
    }
    const size_t wsize = size_t{l.in} * l.out;
    PS_RETURN_IF_ERROR(backend_->Download(*l.dw, grad.data() + l.offset, wsize));
    PS_RETURN_IF_ERROR(backend_->Download(*l.db, grad.data() + l.offset + wsize, l.out));
  }
  return loss;
}

StatusOr<double> Mlp::Accuracy(std::span<const float> x, std::span<const int32_t> labels) {
  PS_RETURN_IF_ERROR(CheckBatch(x, labels));
  const size_t rows = labels.size();
  PS_RETURN_IF_ERROR(Forward(x, rows));
  const Layer& top = net_.back();
  std::vector<float> logits(rows * top.out);
  PS_RETURN_IF_ERROR(backend_->Download(*top.a, logits.data(), logits.size()));
  size_t right = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * top.out;
    right += std::max_element(row, row + top.out) - row == labels[r];
  }
  return static_cast<double>(right) / static_cast<double>(rows);
}

}  // namespace ps
