// The keys and identities of a job under security.mode curve (DESIGN.md
// section 10).
//
// security.keys_dir holds one key pair per identity, written by
// WriteJobKeys (`ps_ctl keygen`):
//
//   server.public,     server.secret        the servers' pair (one per job)
//   worker-<r>.public, worker-<r>.secret    worker rank r's pair, one per rank
//   evaluator.public,  evaluator.secret     the evaluator's (cluster.evaluator)
//   admin.public,      admin.secret         the operator's (ps_ctl)
//
// Each process reads only what its role needs: a server reads server.secret
// and every public key (its allowlist), worker r reads server.public and
// its own pair, ps_ctl reads server.public and the admin pair. So a host
// needs only its own secret: a worker host that is broken into gives away
// one worker's identity, never another's or the admin's. That is why each
// rank has a key of its own rather than one key per job: with one shared
// key a worker could speak as any rank.
//
// A key file holds one line of Z85 text (40 characters), after any number
// of '#' comment lines. A secret file must not be readable by group or
// others (mode 0600): one that is, is refused, saying `chmod 600`.
//
// During a key rotation (docs: README, "Security") a server also accepts
// worker-<r>.previous.public for rank r, until that file is removed.
#ifndef PS_COMMON_SECURITY_H_
#define PS_COMMON_SECURITY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "common/options.h"
#include "common/status.h"
#include "common/transport.h"

namespace ps {

// Who a connection is, as the servers' ZAP handler names it (the user id
// of its messages).
struct PeerIdentity {
  enum class Role { kWorker, kAdmin, kEvaluator };
  Role role = Role::kWorker;
  uint32_t worker = 0;  // kWorker: the rank
};

// The identity a client of worker id `worker` speaks as: the admin for
// kControlWorker, the evaluator for kEvaluatorWorker, else worker `worker`.
PeerIdentity IdentityOf(uint32_t worker);

// "worker 3", "admin", "evaluator": the user id of an identity.
std::string UserId(const PeerIdentity& identity);
// The identity of a user id; InvalidArgument for any other text.
StatusOr<PeerIdentity> ParseUserId(std::string_view user_id);

// The file names of an identity in the keys folder: "worker-3", "admin",
// "server".
std::string KeyName(const PeerIdentity& identity);
inline constexpr std::string_view kServerKeyName = "server";

// Reads a key file. `secret`: the file must be a secret key, mode 0600 or
// stricter (PermissionDenied otherwise, saying chmod 600). NotFound when it
// does not exist (naming it and `ps_ctl keygen`), InvalidArgument when it
// holds no key.
StatusOr<std::string> ReadKeyFile(const std::string& path, bool secret);

// The servers' CURVE options: server.secret of the job's keys folder.
StatusOr<CurveOptions> ServerCurve(const JobOptions& job);
// Every key the servers let in: worker-<r>.public (and
// worker-<r>.previous.public when present) for each rank, admin.public, and
// evaluator.public under cluster.evaluator. A missing one is NotFound
// naming it.
StatusOr<ZapHandler::Allowlist> ServerAllowlist(const JobOptions& job);
// A client's CURVE options: worker `worker`'s pair (the admin's for
// kControlWorker, the evaluator's for kEvaluatorWorker) and server.public. Empty options (no CURVE) under mode
// none.
StatusOr<CurveOptions> ClientCurve(const JobOptions& job, uint32_t worker);

// Under mode curve, whether `identity` may send request `op` in the name
// of `worker` (the header's worker): a worker key only as its own rank and
// never STATS, CHECKPOINT or SHUTDOWN; the admin key only as the control
// client (kControlWorker), for those three; the evaluator's key only as
// the evaluator (kEvaluatorWorker), never those three. PermissionDenied
// saying who tried what.
Status CheckSender(const PeerIdentity& identity, std::string_view op_name, bool admin_op,
                   uint32_t worker);

// Writes a new key pair for the servers, each of `workers` ranks, the
// evaluator and the admin into `dir` (made if missing, mode 0700). FailedPrecondition when the
// folder holds keys already, unless `overwrite`.
Status WriteJobKeys(const std::string& dir, uint32_t workers, bool overwrite);
// Rotation of worker `worker`'s key: its current public key becomes
// worker-<r>.previous.public (still let in) and a new pair replaces it.
Status RotateWorkerKey(const std::string& dir, uint32_t worker);

}  // namespace ps

#endif  // PS_COMMON_SECURITY_H_
