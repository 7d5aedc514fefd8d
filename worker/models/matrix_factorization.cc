#include "worker/models/matrix_factorization.h"

#include <algorithm>
#include <cmath>
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
  if (k == 0) return InvalidArgumentError("matrix factorization: k must be >= 1");
  PS_RETURN_IF_ERROR(CheckIds("user", users));
  PS_RETURN_IF_ERROR(CheckIds("item", items));
  PS_RETURN_IF_ERROR(CheckSize("user_factors", user_factors.size(), users.size(), k));
  PS_RETURN_IF_ERROR(CheckSize("item_factors", item_factors.size(), items.size(), k));
  return Status::Ok();
}

// The row of `id` in sorted `ids`.
StatusOr<size_t> RowOf(const char* what, std::span<const uint64_t> ids, uint64_t id) {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  if (it == ids.end() || *it != id) {
    return InvalidArgumentError(std::string("matrix factorization: ") + what + " " +
                                std::to_string(id) + " of the batch is not among the " +
                                std::to_string(ids.size()) + " pulled " + what + " rows");
  }
  return static_cast<size_t>(it - ids.begin());
}

double Dot(const float* u, const float* v, uint32_t k) {
  double dot = 0;
  for (uint32_t d = 0; d < k; ++d) dot += double{u[d]} * v[d];
  return dot;
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

StatusOr<double> MfLossAndGradient(std::span<const Rating> batch, uint32_t k,
                                   std::span<const uint64_t> users,
                                   std::span<const float> user_factors,
                                   std::span<const uint64_t> items,
                                   std::span<const float> item_factors, float l2,
                                   std::span<float> user_grad, std::span<float> item_grad) {
  PS_RETURN_IF_ERROR(CheckLayout(batch.size(), k, users, user_factors, items, item_factors));
  const bool want_grad = !user_grad.empty() || !item_grad.empty();
  if (want_grad) {
    PS_RETURN_IF_ERROR(CheckSize("user_grad", user_grad.size(), users.size(), k));
    PS_RETURN_IF_ERROR(CheckSize("item_grad", item_grad.size(), items.size(), k));
  }
  // Accumulated in double and rounded once, so rows that appear many times
  // in a batch lose no precision.
  std::vector<double> ug(want_grad ? user_grad.size() : 0, 0.0);
  std::vector<double> vg(want_grad ? item_grad.size() : 0, 0.0);
  const double scale = 1.0 / static_cast<double>(batch.size());
  const double reg = l2;
  double loss = 0;
  for (const Rating& r : batch) {
    PS_ASSIGN_OR_RETURN(const size_t ui, RowOf("user", users, r.user));
    PS_ASSIGN_OR_RETURN(const size_t vi, RowOf("item", items, r.item));
    const float* u = user_factors.data() + ui * k;
    const float* v = item_factors.data() + vi * k;
    const double err = Dot(u, v, k) - double{r.value};
    loss += 0.5 * err * err;
    if (!want_grad) continue;
    double* gu = ug.data() + ui * k;
    double* gv = vg.data() + vi * k;
    for (uint32_t d = 0; d < k; ++d) {
      gu[d] += err * v[d] + reg * u[d];
      gv[d] += err * u[d] + reg * v[d];
    }
  }
  for (size_t i = 0; i < ug.size(); ++i) user_grad[i] = static_cast<float>(ug[i] * scale);
  for (size_t i = 0; i < vg.size(); ++i) item_grad[i] = static_cast<float>(vg[i] * scale);
  return loss * scale;
}

StatusOr<double> MfRmse(std::span<const Rating> ratings, uint32_t k,
                        std::span<const uint64_t> users, std::span<const float> user_factors,
                        std::span<const uint64_t> items, std::span<const float> item_factors) {
  PS_ASSIGN_OR_RETURN(const double half_mse, MfLossAndGradient(ratings, k, users, user_factors,
                                                               items, item_factors, 0.0f, {}, {}));
  return std::sqrt(2.0 * half_mse);
}

}  // namespace ps
