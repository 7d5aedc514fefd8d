// Matrix factorization for ratings (worker/data/generators.h): each user and
// each item has a k-float factor row, and the predicted rating is their dot
// product, r_hat = u . v. The rows live in two parameter-server tables (user
// factors, item factors); a worker pulls the rows a minibatch touches
// (BatchRows), computes the gradient for those rows
// (MatrixFactorization::LossAndGradient) and pushes it back. Ratings are
// partitioned by user (GenerateLowRankRatings gives each rank a contiguous
// block of users), so the user rows of a worker's users are touched only by
// that worker, while item rows are shared by all workers.
//
// The model runs on a compute backend (worker/backend.h). The host keeps the
// bookkeeping: it checks the arguments and maps each rating's user and item
// to its row among the pulled rows (binary search). The backend gets the
// pulled factor rows and, per rating, gathers u and v (GatherRows), takes
// err = u . v - r (RowDots, Axpy), forms err * v + l2 * u and
// err * u + l2 * v (ScaleRows, Axpy) and adds them into the gradient of the
// pulled rows (ScatterAddRows), scaled by 1 / B. The gradients are
// downloaded into the caller's spans; the errors are downloaded too and the
// loss is summed from them on the host in double.
//
// Thread-compatible (it reuses host and backend buffers between calls);
// `backend` must outlive the model.
#ifndef PS_WORKER_MODELS_MATRIX_FACTORIZATION_H_
#define PS_WORKER_MODELS_MATRIX_FACTORIZATION_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/backend.h"
#include "worker/data/generators.h"

namespace ps {

// The sorted distinct user ids and item ids of `batch`: the rows a worker
// pulls from the user and item factor tables. Both outputs are replaced.
void BatchRows(std::span<const Rating> batch, std::vector<uint64_t>* users,
               std::vector<uint64_t>* items);

class MatrixFactorization {
 public:
  // A model of rank k on `backend`; its buffers grow with the batches it
  // sees. InvalidArgument for k == 0 or a null backend.
  static StatusOr<std::unique_ptr<MatrixFactorization>> Create(Backend* backend, uint32_t k);

  uint32_t k() const { return k_; }

  // For a batch of B ratings, returns the mean over the batch of
  // 0.5 * (u . v - r)^2 (each error a float from the backend, summed in
  // double). `users` must be sorted and distinct (as from BatchRows) and
  // hold every user of the batch; user_factors is users.size() x k,
  // row-major, row i the factors of users[i]. The same holds for `items` and
  // item_factors.
  //
  // When user_grad and item_grad are not empty (each the size of its factor
  // array) they receive the gradient, with respect to every pulled row, of
  //   mean over the batch of 0.5 * (u . v - r)^2
  //     + 0.5 * l2 * (sum over the batch's ratings of |u|^2 + |v|^2) / B,
  // so the L2 term of a row is weighted by how often the row appears in the
  // batch (the usual SGD regularization for matrix factorization). Rows
  // listed but absent from the batch get zero. Pass both gradients empty for
  // the loss alone.
  //
  // InvalidArgument for an empty batch, ids not sorted and distinct, a
  // factor or gradient size that does not match, or a batch id missing from
  // users / items.
  StatusOr<double> LossAndGradient(std::span<const Rating> batch, std::span<const uint64_t> users,
                                   std::span<const float> user_factors,
                                   std::span<const uint64_t> items,
                                   std::span<const float> item_factors, float l2,
                                   std::span<float> user_grad, std::span<float> item_grad);

  // Root mean squared error of u . v against the ratings, with the same
  // layout and errors as LossAndGradient (InvalidArgument for no ratings).
  StatusOr<double> Rmse(std::span<const Rating> ratings, std::span<const uint64_t> users,
                        std::span<const float> user_factors, std::span<const uint64_t> items,
                        std::span<const float> item_factors);

 private:
  MatrixFactorization(Backend* backend, uint32_t k) : backend_(backend), k_(k) {}
  // Checks the arguments, maps the batch to pulled rows, uploads the factors
  // and ratings, and leaves the gathered rows in batch_u_ / batch_v_ and the
  // errors u . v - r in err_ on the backend.
  Status Forward(std::span<const Rating> batch, std::span<const uint64_t> users,
                 std::span<const float> user_factors, std::span<const uint64_t> items,
                 std::span<const float> item_factors);
  // Sum over the batch of err^2, from err_ downloaded.
  StatusOr<double> SumOfSquaredErrors(size_t ratings);

  Backend* const backend_;
  const uint32_t k_;
  std::vector<uint32_t> user_rows_, item_rows_;  // per rating: its row among the pulled rows
  std::vector<float> values_;                    // per rating: r
  std::vector<float> host_err_;
  std::unique_ptr<DeviceBuffer> user_factors_, item_factors_;  // the pulled rows
  std::unique_ptr<DeviceBuffer> batch_u_, batch_v_;            // B x k, gathered per rating
  std::unique_ptr<DeviceBuffer> values_dev_, err_;             // B
  // B x k per-rating gradients, used when l2 != 0 (else batch_v_ / batch_u_
  // are scaled in place).
  std::unique_ptr<DeviceBuffer> grad_u_rows_, grad_v_rows_;
  std::unique_ptr<DeviceBuffer> user_grad_, item_grad_;  // the pulled rows' gradients
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_MATRIX_FACTORIZATION_H_
