// Matrix factorization for ratings (worker/data/generators.h): each user and
// each item has a k-float factor row, and the predicted rating is their dot
// product, r_hat = u . v. The rows live in two parameter-server tables (user
// factors, item factors); a worker pulls the rows a minibatch touches
// (BatchRows), computes the gradient for those rows (MfLossAndGradient) and
// pushes it back.
//
// The model runs on the CPU, not on the Backend interface (worker/backend.h):
// per rating it gathers two k-float rows and takes one dot product, a sparse
// gather with almost no arithmetic per byte, which a round trip to a device
// would cost more than it saves. Ratings are partitioned by user
// (GenerateLowRankRatings gives each rank a contiguous block of users), so the
// user rows of a worker's users are touched only by that worker, while item
// rows are shared by all workers.
//
// All functions are pure and thread-safe.
#ifndef PS_WORKER_MODELS_MATRIX_FACTORIZATION_H_
#define PS_WORKER_MODELS_MATRIX_FACTORIZATION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/data/generators.h"

namespace ps {

// The sorted distinct user ids and item ids of `batch`: the rows a worker
// pulls from the user and item factor tables. Both outputs are replaced.
void BatchRows(std::span<const Rating> batch, std::vector<uint64_t>* users,
               std::vector<uint64_t>* items);

// For a batch of B ratings, returns the mean over the batch of
// 0.5 * (u . v - r)^2, computed in double. `users` must be sorted and
// distinct (as from BatchRows) and hold every user of the batch;
// user_factors is users.size() x k, row-major, row i the factors of users[i].
// The same holds for `items` and item_factors.
//
// When user_grad and item_grad are not empty (each the size of its factor
// array) they receive the gradient, with respect to every pulled row, of
//   mean over the batch of 0.5 * (u . v - r)^2
//     + 0.5 * l2 * (sum over the batch's ratings of |u|^2 + |v|^2) / B,
// so the L2 term of a row is weighted by how often the row appears in the
// batch (the usual SGD regularization for matrix factorization). Rows listed
// but absent from the batch get zero. Pass both gradients empty for the loss
// alone.
//
// InvalidArgument for an empty batch, k == 0, ids not sorted and distinct, a
// factor or gradient size that does not match, or a batch id missing from
// users / items.
StatusOr<double> MfLossAndGradient(std::span<const Rating> batch, uint32_t k,
                                   std::span<const uint64_t> users,
                                   std::span<const float> user_factors,
                                   std::span<const uint64_t> items,
                                   std::span<const float> item_factors, float l2,
                                   std::span<float> user_grad, std::span<float> item_grad);

// Root mean squared error of u . v against the ratings, with the same layout
// and errors as MfLossAndGradient (InvalidArgument for no ratings).
StatusOr<double> MfRmse(std::span<const Rating> ratings, uint32_t k,
                        std::span<const uint64_t> users, std::span<const float> user_factors,
                        std::span<const uint64_t> items, std::span<const float> item_factors);

}  // namespace ps

#endif  // PS_WORKER_MODELS_MATRIX_FACTORIZATION_H_
