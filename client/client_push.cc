// Client's pushes: a push of rows (a hashed table's repeated ids summed
// first, client/id_dedup.h) or of the whole table, and the encoding of a
// push part in a 16-bit wire type with each value's residual (error
// feedback: a range table's by row, a hashed table's by id), which also
// updates the parameter cache with what was sent.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "client/client.h"
#include "common/wire_floats.h"

namespace ps {

StatusOr<Frame> Client::EncodePush(const Call& call, const PartSpec& spec) {
  const TableOptions& t = job_.tables[call.table];
  const WireType type = t.wire.push;
  const uint32_t dim = t.dim;
  std::vector<float>& residual = residuals_[call.table];
  std::unique_ptr<HashedResiduals>& kept = hashed_residuals_[call.table];
  // On the first push: a range table's residuals for every row, a hashed
  // table's store of them by id.
  if (t.hashed() && kept == nullptr) {
    kept = std::make_unique<HashedResiduals>(dim, HashedResiduals::BoundFor(t));
  } else if (!t.hashed() && residual.empty()) {
    residual.assign(t.rows * dim, 0.0f);
  }
  PS_ASSIGN_OR_RETURN(Frame frame, Frame::Allocate(spec.count * dim * WireBytes(type)));
  auto* out = static_cast<std::byte*>(frame.mutable_data());
  const float* gradient = call.values->data();
  if (spec.kind == PartSpec::Kind::kDenseRange) {
    // The part's rows are table rows first_row.. and request rows offset..
    PS_RETURN_IF_ERROR(EncodeWithFeedback(
        type, {gradient + spec.offset * dim, spec.count * dim},
        std::span<float>(residual).subspan(spec.first_row * dim, spec.count * dim), out));
  } else {
    // Rows from anywhere in the table: their values and residuals are
    // gathered, encoded in one pass, and the new residuals put back.
    const size_t n = spec.count * dim;
    push_values_.resize(n);
    push_residuals_.resize(n);
    push_kept_.resize(spec.count);
    if (kept != nullptr) kept->StartRequest();
    for (uint64_t x = 0; x < spec.count; ++x) {
      const uint64_t i = RowIndex(spec, x);
      CopyRow(gradient + i * dim, dim, push_values_.data() + x * dim);
      float* r = kept != nullptr ? kept->Find(call.rows[i]) : residual.data() + call.rows[i] * dim;
      push_kept_[x] = r;
      if (r != nullptr) {
        CopyRow(r, dim, push_residuals_.data() + x * dim);
      } else {  // no room to keep it: rounded without one
        std::fill_n(push_residuals_.data() + x * dim, dim, 0.0f);
      }
    }
    PS_RETURN_IF_ERROR(EncodeWithFeedback(type, {push_values_.data(), n},
                                          {push_residuals_.data(), n}, out));
    for (uint64_t x = 0; x < spec.count; ++x) {
      // A row pushed twice in one request: its later residual wins, as if
      // the two values had been pushed one after the other.
      if (push_kept_[x] != nullptr) CopyRow(push_residuals_.data() + x * dim, dim, push_kept_[x]);
    }
  }
  if (cache_ != nullptr) {
    // The cached rows get what the shard applies: the rounded values. (A
    // rule with state drops the rows instead and reads no value.)
    const float* sent = nullptr;
    if (t.optimizer.Stateless()) {
      push_values_.resize(spec.count * dim);  // free again once encoded
      DecodeFloats(type, out, push_values_.size(), push_values_.data());
      sent = push_values_.data();
    }
    if (spec.kind == PartSpec::Kind::kDenseRange) {
      cache_->ApplyPush(call.table, spec.first_row, nullptr, spec.count, sent);
    } else {
      push_rows_.resize(spec.count);
      for (uint64_t x = 0; x < spec.count; ++x) push_rows_[x] = call.rows[RowIndex(spec, x)];
      cache_->ApplyPush(call.table, 0, push_rows_.data(), spec.count, sent);
    }
  }
  return frame;
}

StatusOr<Ticket> Client::Push(uint32_t table, std::span<const uint64_t> rows, SharedFloats values,
                              Callback done) {
  // What is sent: the call's rows, or a hashed table's ids once each with
  // their rows summed (client/id_dedup.h).
  std::span<const uint64_t> ids = rows;
  const SharedFloats* sent = &values;
  SharedFloats summed;
  // Taken for this call (a callback run while it waits for a slot may push
  // too); Issue copies the ids into the requests' frames.
  std::vector<uint64_t> unique;
  if (table < job_.tables.size() && job_.tables[table].hashed() &&
      values.size() == rows.size() * job_.tables[table].dim) {
    std::vector<float> sums;
    if (dedup_.SumDuplicates(rows, values.data(), job_.tables[table].dim, &unique_ids_, &sums)) {
      counters_.summed_rows += rows.size() - unique_ids_.size();
      summed = SharedFloats::Take(std::move(sums));
      unique = std::move(unique_ids_);
      ids = unique;
      sent = &summed;
    }
  }
  auto ticket = Issue({.op = Op::kPush, .table = table, .rows = ids, .values = sent},
                      std::move(done));
  // The cache takes what the shard applies (a 16-bit push updates it as it
  // is encoded: EncodePush).
  if (ticket.ok() && cache_ != nullptr && job_.tables[table].wire.push == WireType::kF32) {
    cache_->ApplyPush(table, 0, ids.data(), ids.size(), sent->data());
  }
  if (!unique.empty()) unique_ids_ = std::move(unique);
  return ticket;
}

StatusOr<Ticket> Client::PushDense(uint32_t table, SharedFloats values, Callback done) {
  auto ticket = Issue({.op = Op::kPush, .table = table, .dense = true, .values = &values},
                      std::move(done));
  if (ticket.ok() && cache_ != nullptr && job_.tables[table].wire.push == WireType::kF32) {
    cache_->ApplyPush(table, 0, nullptr, job_.tables[table].rows, values.data());
  }
  return ticket;
}

}  // namespace ps
