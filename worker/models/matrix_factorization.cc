#include "worker/models/matrix_factorization.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace ps {
namespace {

Status CheckIds(const char* what, std::span<const uint64_t> ids) {
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i - 1] >= ids[i]) {
      return InvalidArgumentError(std::string("matrix factorization: ") + what +
                                  " ids must be sorted and distinct (as from BatchRows); " +
                                  "position " + std::to_string(i) + " breaks the order");
    }
  }
  return Status::Ok();
}

Status CheckSize(const char* what, size_t got, size_t rows, uint32_t k) {
  if (got != rows * k) {
    return InvalidArgumentError(std::string("matrix factorization: ") + what + " has " +
                                std::to_string(got) + " floats, expected " + std::to_string(rows) +
                                " rows x k = " + std::to_string(k) + " = " +
                                std::to_string(rows * k));
  }
  return Status::Ok();
}

Status CheckLayout(size_t num_ratings, uint32_t k, std::span<const uint64_t> users,
                   std::span<const float> user_factors, std::span<const uint64_t> items,
                   std::span<const float> item_factors) {
  if (num_ratings == 0) return InvalidArgumentError("matrix factorization: no ratings");
  PS_RETURN_IF_ERROR(CheckIds("user", users));
  PS_RETURN_IF_ERROR(CheckIds("item", items));
  PS_RETURN_IF_ERROR(CheckSize("user_factors", user_factors.size(), users.size(), k));
  PS_RETURN_IF_ERROR(CheckSize("item_factors", item_factors.size(), items.size(), k));
  if (users.size() > std::numeric_limits<uint32_t>::max() ||
      items.size() > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgumentError("matrix factorization: more than 2^32 - 1 pulled rows");
  }
  return Status::Ok();
}

// The row of `id` in sorted `ids`.
StatusOr<uint32_t> RowOf(const char* what, std::span<const uint64_t> ids, uint64_t id) {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  if (it == ids.end() || *it != id) {
    return InvalidArgumentError(std::string("matrix factorization: ") + what + " " +
                                std::to_string(id) + " of the batch is not among the " +
                                std::to_string(ids.size()) + " pulled " + what + " rows");
  }
  return static_cast<uint32_t>(it - ids.begin());
}

}  // namespace

void BatchRows(std::span<const Rating> batch, std::vector<uint64_t>* users,
               std::vector<uint64_t>* items) {
  users->clear();
  items->clear();
  users->reserve(batch.size());
  items->reserve(batch.size());
  for (const Rating& r : batch) {
    users->push_back(r.user);
    items->push_back(r.item);
  }
  for (std::vector<uint64_t>* ids : {users, items}) {
    std::sort(ids->begin(), ids->end());
    ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
  }
}

StatusOr<std::unique_ptr<MatrixFactorization>> MatrixFactorization::Create(Backend* backend,
                                                                           uint32_t k) {
  if (backend == nullptr) return InvalidArgumentError("matrix factorization: the backend is null");
  if (k == 0) return InvalidArgumentError("matrix factorization: k must be >= 1");
  return std::unique_ptr<MatrixFactorization>(new MatrixFactorization(backend, k));
}

Status MatrixFactorization::Forward(std::span<const Rating> batch, std::span<const uint64_t> users,
                                    std::span<const float> user_factors,
                                    std::span<const uint64_t> items,
                                    std::span<const float> item_factors) {
  PS_RETURN_IF_ERROR(CheckLayout(batch.size(), k_, users, user_factors, items, item_factors));
  const size_t b = batch.size();
  user_rows_.resize(b);
  item_rows_.resize(b);
  values_.resize(b);
  for (size_t i = 0; i < b; ++i) {
    PS_ASSIGN_OR_RETURN(user_rows_[i], RowOf("user", users, batch[i].user));
    PS_ASSIGN_OR_RETURN(item_rows_[i], RowOf("item", items, batch[i].item));
    values_[i] = batch[i].value;
  }
  Backend* const be = backend_;
  PS_RETURN_IF_ERROR(GrowBuffer(be, user_factors.size(), &user_factors_));
  PS_RETURN_IF_ERROR(GrowBuffer(be, item_factors.size(), &item_factors_));
  PS_RETURN_IF_ERROR(GrowBuffer(be, b * k_, &batch_u_));
  PS_RETURN_IF_ERROR(GrowBuffer(be, b * k_, &batch_v_));
  PS_RETURN_IF_ERROR(GrowBuffer(be, b, &values_dev_));
  PS_RETURN_IF_ERROR(GrowBuffer(be, b, &err_));
  PS_RETURN_IF_ERROR(be->Upload(user_factors.data(), user_factors.size(), user_factors_.get()));
  PS_RETURN_IF_ERROR(be->Upload(item_factors.data(), item_factors.size(), item_factors_.get()));
  PS_RETURN_IF_ERROR(be->Upload(values_.data(), b, values_dev_.get()));
  // Per rating: u and v, then err = u . v - r.
  PS_RETURN_IF_ERROR(
      be->GatherRows(users.size(), k_, *user_factors_, user_rows_.data(), b, batch_u_.get()));
  PS_RETURN_IF_ERROR(
      be->GatherRows(items.size(), k_, *item_factors_, item_rows_.data(), b, batch_v_.get()));
  PS_RETURN_IF_ERROR(be->RowDots(b, k_, *batch_u_, *batch_v_, err_.get()));
  return be->Axpy(b, -1.0f, *values_dev_, err_.get());
}

StatusOr<double> MatrixFactorization::SumOfSquaredErrors(size_t ratings) {
  host_err_.resize(ratings);
  PS_RETURN_IF_ERROR(backend_->Download(*err_, host_err_.data(), ratings));
  double sum = 0;
  for (float e : host_err_) sum += double{e} * e;
  return sum;
}

StatusOr<double> MatrixFactorization::LossAndGradient(std::span<const Rating> batch,
                                                      std::span<const uint64_t> users,
                                                      std::span<const float> user_factors,
                                                      std::span<const uint64_t> items,
                                                      std::span<const float> item_factors, float l2,
                                                      std::span<float> user_grad,
                                                      std::span<float> item_grad) {
  const bool want_grad = !user_grad.empty() || !item_grad.empty();
  if (want_grad) {
    PS_RETURN_IF_ERROR(CheckSize("user_grad", user_grad.size(), users.size(), k_));
    PS_RETURN_IF_ERROR(CheckSize("item_grad", item_grad.size(), items.size(), k_));
  }
  PS_RETURN_IF_ERROR(Forward(batch, users, user_factors, items, item_factors));
  const size_t b = batch.size();
  if (want_grad) {
    Backend* const be = backend_;
    PS_RETURN_IF_ERROR(GrowBuffer(be, user_grad.size(), &user_grad_));
    PS_RETURN_IF_ERROR(GrowBuffer(be, item_grad.size(), &item_grad_));
    // Per rating: d/du = err * v + l2 * u and d/dv = err * u + l2 * v.
    // Without the l2 terms the gathered rows are not needed again and are
    // scaled in place; with them, err * v and err * u start from fresh
    // gathers so that u and v stay intact.
    DeviceBuffer* du = batch_v_.get();
    DeviceBuffer* dv = batch_u_.get();
    if (l2 != 0.0f) {
      PS_RETURN_IF_ERROR(GrowBuffer(be, b * k_, &grad_u_rows_));
      PS_RETURN_IF_ERROR(GrowBuffer(be, b * k_, &grad_v_rows_));
      du = grad_u_rows_.get();
      dv = grad_v_rows_.get();
      PS_RETURN_IF_ERROR(
          be->GatherRows(items.size(), k_, *item_factors_, item_rows_.data(), b, du));
      PS_RETURN_IF_ERROR(
          be->GatherRows(users.size(), k_, *user_factors_, user_rows_.data(), b, dv));
    }
    PS_RETURN_IF_ERROR(be->ScaleRows(b, k_, *err_, du));
    PS_RETURN_IF_ERROR(be->ScaleRows(b, k_, *err_, dv));
    if (l2 != 0.0f) {
      PS_RETURN_IF_ERROR(be->Axpy(b * k_, l2, *batch_u_, du));
      PS_RETURN_IF_ERROR(be->Axpy(b * k_, l2, *batch_v_, dv));
    }
    // Summed into the pulled rows (a row in several ratings gets the sum),
    // then divided by B for the mean.
    PS_RETURN_IF_ERROR(be->Fill(user_grad.size(), 0.0f, user_grad_.get()));
    PS_RETURN_IF_ERROR(be->Fill(item_grad.size(), 0.0f, item_grad_.get()));
    PS_RETURN_IF_ERROR(
        be->ScatterAddRows(b, k_, *du, user_rows_.data(), users.size(), user_grad_.get()));
    PS_RETURN_IF_ERROR(
        be->ScatterAddRows(b, k_, *dv, item_rows_.data(), items.size(), item_grad_.get()));
    const float inv_b = 1.0f / static_cast<float>(b);
    PS_RETURN_IF_ERROR(be->Scale(user_grad.size(), inv_b, user_grad_.get()));
    PS_RETURN_IF_ERROR(be->Scale(item_grad.size(), inv_b, item_grad_.get()));
    PS_RETURN_IF_ERROR(be->Download(*user_grad_, user_grad.data(), user_grad.size()));
    PS_RETURN_IF_ERROR(be->Download(*item_grad_, item_grad.data(), item_grad.size()));
  }
  PS_ASSIGN_OR_RETURN(const double sse, SumOfSquaredErrors(b));
  return 0.5 * sse / static_cast<double>(b);
}

StatusOr<double> MatrixFactorization::Rmse(std::span<const Rating> ratings,
                                           std::span<const uint64_t> users,
                                           std::span<const float> user_factors,
                                           std::span<const uint64_t> items,
                                           std::span<const float> item_factors) {
  PS_RETURN_IF_ERROR(Forward(ratings, users, user_factors, items, item_factors));
  PS_ASSIGN_OR_RETURN(const double sse, SumOfSquaredErrors(ratings.size()));
  return std::sqrt(sse / static_cast<double>(ratings.size()));
}

}  // namespace ps
