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
    m->num_parameters_ += layer.size();
    PS_ASSIGN_OR_RETURN(layer.a, backend->Allocate(size_t{max_batch} * layer.out));
    PS_ASSIGN_OR_RETURN(layer.dz, backend->Allocate(size_t{max_batch} * layer.out));
    m->net_.push_back(std::move(layer));
  }
  PS_ASSIGN_OR_RETURN(m->params_, backend->Allocate(m->num_parameters_));
  PS_ASSIGN_OR_RETURN(m->grad_, backend->Allocate(m->num_parameters_));
  return m;
}

Status Mlp::SetParameters(std::span<const float> params) {
  if (params.size() != num_parameters_) {
    return InvalidArgumentError("MLP: got " + std::to_string(params.size()) +
                                " parameters, expected " + std::to_string(num_parameters_));
  }
  return backend_->Upload(params.data(), params.size(), params_.get());
}

double Mlp::TrainStepFlops(uint32_t rows) const {
  double flops = 0;
  for (size_t i = 0; i < net_.size(); ++i) {
    const double product = 2.0 * rows * net_[i].in * net_[i].out;
    flops += product * (i == 0 ? 2 : 3);
  }
  return flops;
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

Status Mlp::Forward(const DeviceBuffer& x, const DeviceBuffer& params, size_t rows) {
  const DeviceBuffer* input = &x;
  for (size_t i = 0; i < net_.size(); ++i) {
    Layer& l = net_[i];
    const size_t wsize = size_t{l.in} * l.out;
    const BufferView w(params, l.offset, wsize);
    const BufferView b(params, l.offset + wsize, l.out);
    PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kNo, Transpose::kNo, rows, l.out, l.in, 1.0f,
                                      *input, w, 0.0f, l.a.get()));
    PS_RETURN_IF_ERROR(backend_->AddBias(rows, l.out, b, l.a.get()));
    if (i + 1 < net_.size()) PS_RETURN_IF_ERROR(backend_->Relu(rows * l.out, l.a.get()));
    input = l.a.get();
  }
  return Status::Ok();
}

Status Mlp::Backward(const DeviceBuffer& x, const DeviceBuffer& params, size_t rows,
                     DeviceBuffer* grad, float* host, DeviceBuffer* dx) {
  for (size_t i = net_.size(); i-- > 0;) {
    Layer& l = net_[i];
    const size_t wsize = size_t{l.in} * l.out;
    const DeviceBuffer& input = i == 0 ? x : *net_[i - 1].a;
    BufferView dw(*grad, l.offset, wsize);
    BufferView db(*grad, l.offset + wsize, l.out);
    // dW = input^T dz, db = column sums of dz.
    PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kYes, Transpose::kNo, l.in, l.out, rows, 1.0f,
                                      input, *l.dz, 0.0f, &dw));
    PS_RETURN_IF_ERROR(backend_->SumRows(rows, l.out, *l.dz, &db));
    if (host != nullptr) {
      // W and b are adjacent: one copy per layer, on its way while the
      // layers below compute.
      const BufferView layer_grad(*grad, l.offset, l.size());
      PS_RETURN_IF_ERROR(backend_->DownloadAsync(layer_grad, host + l.offset, l.size()));
    }
    if (i > 0) {
      // dz of the layer below = (dz W^T) where its ReLU output was positive.
      Layer& below = net_[i - 1];
      const BufferView w(params, l.offset, wsize);
      PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kNo, Transpose::kYes, rows, l.in, l.out, 1.0f,
                                        *l.dz, w, 0.0f, below.dz.get()));
      PS_RETURN_IF_ERROR(backend_->ReluBackward(rows * l.in, *below.a, below.dz.get()));
    } else if (dx != nullptr) {
      // The inputs are not activations: no ReLU between them and layer 0.
      const BufferView w(params, l.offset, wsize);
      PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kNo, Transpose::kYes, rows, l.in, l.out, 1.0f,
                                        *l.dz, w, 0.0f, dx));
    }
  }
  return Status::Ok();
}

Status Mlp::Loss(size_t rows, std::span<const int32_t> labels, DeviceBuffer* dz, float* loss) {
  Layer& top = net_.back();
  if (top.out == 1) return backend_->LogisticLoss(rows, *top.a, labels.data(), dz, loss);
  return backend_->SoftmaxCrossEntropy(rows, top.out, *top.a, labels.data(), top.a.get(), dz,
                                       loss);
}

StatusOr<float> Mlp::Step(std::span<const float> x, std::span<const int32_t> labels,
                          const float* params, std::span<float> grad, std::span<float> dx) {
  PS_RETURN_IF_ERROR(CheckBatch(x, labels));
  if (!grad.empty() && grad.size() != num_parameters_) {
    return InvalidArgumentError("MLP: gradient buffer of " + std::to_string(grad.size()) +
                                " floats, expected " + std::to_string(num_parameters_));
  }
  if (!dx.empty() && (grad.empty() || dx.size() != x.size())) {
    return InvalidArgumentError("MLP: input gradient buffer of " + std::to_string(dx.size()) +
                                " floats, expected " + std::to_string(x.size()) +
                                " (one per input) and a parameter gradient beside it");
  }
  const size_t rows = labels.size();
  const bool in_place = backend_->host_memory();
  // Views of the caller's memory where the backend computes on host memory;
  // the model's own buffers otherwise. Built for both, used for one.
  const BufferView x_here(*backend_, x.data(), in_place ? x.size() : 0);
  const BufferView params_here(*backend_, params, in_place && params != nullptr ? num_parameters_ : 0);
  BufferView grad_here(*backend_, grad.data(), in_place ? grad.size() : 0);
  BufferView dx_here(*backend_, dx.data(), in_place ? dx.size() : 0);
  DeviceBuffer* input_grad = nullptr;
  if (!dx.empty()) {
    if (in_place) {
      input_grad = &dx_here;
    } else {
      if (dx_ == nullptr) {
        PS_ASSIGN_OR_RETURN(dx_, backend_->Allocate(size_t{max_batch_} * layers_[0]));
      }
      input_grad = dx_.get();
    }
  }
  const DeviceBuffer* input = x_.get();
  const DeviceBuffer* weights = params_.get();
  DeviceBuffer* gradient = grad_.get();
  float* download = grad.data();
  if (in_place) {
    input = &x_here;
    if (params != nullptr) weights = &params_here;
    gradient = &grad_here;
    download = nullptr;
  } else {
    // The batch and layer 0 first: the layers' uploads follow in the order
    // the forward pass needs them.
    PS_RETURN_IF_ERROR(backend_->UploadAsync(x.data(), x.size(), x_.get()));
    if (params != nullptr) {
      for (const Layer& l : net_) {
        BufferView layer(*params_, l.offset, l.size());
        PS_RETURN_IF_ERROR(backend_->UploadAsync(params + l.offset, l.size(), &layer));
      }
    }
  }
  PS_RETURN_IF_ERROR(Forward(*input, *weights, rows));
  float loss = 0;
  PS_RETURN_IF_ERROR(Loss(rows, labels, grad.empty() ? nullptr : net_.back().dz.get(), &loss));
  if (!grad.empty()) {
    PS_RETURN_IF_ERROR(Backward(*input, *weights, rows, gradient, download, input_grad));
  }
  if (input_grad != nullptr && !in_place) {
    PS_RETURN_IF_ERROR(backend_->DownloadAsync(*input_grad, dx.data(), dx.size()));
  }
  PS_RETURN_IF_ERROR(backend_->Synchronize());
  return loss;
}

StatusOr<float> Mlp::LossAndGradient(std::span<const float> x, std::span<const int32_t> labels,
                                     std::span<float> grad) {
  return Step(x, labels, nullptr, grad, {});
}

StatusOr<float> Mlp::TrainStep(std::span<const float> x, std::span<const int32_t> labels,
                               std::span<const float> params, std::span<float> grad,
                               std::span<float> dx) {
  if (params.size() != num_parameters_ || grad.size() != num_parameters_) {
    return InvalidArgumentError("MLP: a training step needs " + std::to_string(num_parameters_) +
                                " parameters and gradient floats, got " +
                                std::to_string(params.size()) + " and " +
                                std::to_string(grad.size()));
  }
  return Step(x, labels, params.data(), grad, dx);
}

Status Mlp::Logits(std::span<const float> x, std::span<float> out) {
  const size_t rows = x.size() / layers_[0];
  const Layer& top = net_.back();
  if (rows == 0 || rows > max_batch_ || x.size() != rows * layers_[0] ||
      out.size() != rows * top.out) {
    return InvalidArgumentError("MLP: " + std::to_string(x.size()) + " inputs and " +
                                std::to_string(out.size()) + " outputs; expected 1.." +
                                std::to_string(max_batch_) + " rows of " +
                                std::to_string(layers_[0]) + " inputs and " +
                                std::to_string(top.out) + " outputs");
  }
  PS_RETURN_IF_ERROR(backend_->Upload(x.data(), x.size(), x_.get()));
  PS_RETURN_IF_ERROR(Forward(*x_, *params_, rows));
  return backend_->Download(*top.a, out.data(), out.size());
}

StatusOr<double> Mlp::Accuracy(std::span<const float> x, std::span<const int32_t> labels) {
  PS_RETURN_IF_ERROR(CheckBatch(x, labels));
  const size_t rows = labels.size();
  const uint32_t classes = net_.back().out;
  std::vector<float> logits(rows * classes);
  PS_RETURN_IF_ERROR(Logits(x, logits));
  size_t right = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * classes;
    // One output: the logit of label 1.
    const int32_t predicted = classes == 1 ? (row[0] > 0 ? 1 : 0)
                                           : static_cast<int32_t>(std::max_element(row, row + classes) - row);
    right += predicted == labels[r];
  }
  return static_cast<double>(right) / static_cast<double>(rows);
}

}  // namespace ps
