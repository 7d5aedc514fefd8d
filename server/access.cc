#include "server/access.h"

#include <utility>

#include "common/logging.h"
#include "common/security.h"

namespace ps {

std::string HeldBack(uint64_t held_back) {
  return held_back == 0 ? std::string()
                        : " (" + std::to_string(held_back) + " more since the last line)";
}

bool LogRateLimit::ShouldLog(const std::string& key, uint64_t* held_back) {
  const Clock::TimePoint now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    // Many distinct peers (a scan) cannot grow this past its bound.
    if (entries_.size() >= kMaxKeys) entries_.clear();
    entries_.emplace(key, Entry{now, 0});
    *held_back = 0;
    return true;
  }
  if (now - it->second.last < interval_) {
    ++it->second.held_back;
    return false;
  }
  *held_back = it->second.held_back;
  it->second = Entry{now, 0};
  return true;
}

StatusOr<std::unique_ptr<ShardAccess>> ShardAccess::Create(const JobOptions& job, uint32_t shard,
                                                           Context* context, const Clock& clock,
                                                           CurveOptions* curve) {
  std::unique_ptr<ShardAccess> access(new ShardAccess(job, shard, clock));
  *curve = CurveOptions();
  if (job.security.mode != SecurityMode::kCurve) return access;
  PS_ASSIGN_OR_RETURN(*curve, ServerCurve(job));
  PS_ASSIGN_OR_RETURN(ZapHandler::Allowlist allowed, ServerAllowlist(job));
  const size_t keys = allowed.size();
  ShardAccess* raw = access.get();
  PS_ASSIGN_OR_RETURN(
      access->zap_,
      ZapHandler::Start(context, std::move(allowed), [raw](const ZapHandler::Refusal& who) {
        uint64_t held_back = 0;
        if (!raw->handshake_log_.ShouldLog(who.address, &held_back)) {
          return;
        }
        PS_LOG_WARN("shard {}: refused a {} handshake from {}{}: the key is not one of this "
                    "job's (security.keys_dir {}){}",
                    raw->shard_, who.mechanism, who.address.empty() ? "?" : who.address,
                    who.public_key.empty() ? "" : " with public key " + who.public_key,
                    raw->job_.security.keys_dir,
                    HeldBack(held_back));
      }));
  PS_LOG_INFO("shard {}: CurveZMQ on; {} client keys allowed (security.keys_dir {})", shard, keys,
              job.security.keys_dir);
  return access;
}

Status ShardAccess::Check(const Frame& first_frame, const MessageHeader& header) {
  if (zap_ == nullptr) return Status::Ok();
  const std::string user_id = first_frame.Property("User-Id");
  auto identity = ParseUserId(user_id);
  // The operator's ops need the admin key.
  const bool admin_op = Traits(header.op).op_class == OpClass::kControl;
  Status allowed = identity.ok() ? CheckSender(*identity, OpName(header.op), admin_op, header.worker)
                                 : PermissionDeniedError("a connection without a job identity (" +
                                                         identity.status().message() + ")");
  if (allowed.ok()) return allowed;
  ++refused_requests_;
  return allowed.WithContext("shard " + std::to_string(shard_) + ": " + OpName(header.op) +
                             " request " + std::to_string(header.request_id) + " from " +
                             (user_id.empty() ? "an unknown peer" : user_id) + " at " +
                             first_frame.Property("Peer-Address"));
}

Status ShardAccess::ReloadAllowlist() {
  if (zap_ == nullptr) return Status::Ok();
  PS_ASSIGN_OR_RETURN(ZapHandler::Allowlist allowed, ServerAllowlist(job_));
  const size_t keys = allowed.size();
  zap_->SetAllowlist(std::move(allowed));
  PS_LOG_INFO("shard {}: key files read again: {} client keys allowed (connections already made "
              "stay)",
              shard_, keys);
  return Status::Ok();
}

}  // namespace ps
