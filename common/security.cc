#include "common/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "common/text.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kWorkerPrefix = "worker ";

std::string KeyPath(const std::string& dir, std::string_view name, std::string_view suffix) {
  return (fs::path(dir) / (std::string(name) + std::string(suffix))).string();
}

// Writes `text` to `path` with `mode`, replacing it atomically (a temp file
// renamed over it), so a reader never sees half a key.
Status WriteKeyFile(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    return PermissionDeniedError("cannot create " + tmp + ": " + std::strerror(errno));
  }
  // The mode is fixed after open, whatever the umask took away or added.
  const bool ok = ::fchmod(fd, mode) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return InternalError("cannot write " + path + ": " + std::strerror(ok ? errno : err));
  }
  return Status::Ok();
}

Status WritePair(const std::string& dir, const std::string& name, const std::string& who) {
  PS_ASSIGN_OR_RETURN(CurveKeyPair pair, NewCurveKeyPair());
  PS_RETURN_IF_ERROR(WriteKeyFile(KeyPath(dir, name, ".public"),
                                  "# CurveZMQ public key of " + who + " (Z85)\n" +
                                      pair.public_key + "\n",
                                  0644));
  return WriteKeyFile(KeyPath(dir, name, ".secret"),
                      "# CurveZMQ secret key of " + who +
                          " (Z85): keep it on that host only, mode 0600\n" + pair.secret_key +
                          "\n",
                      0600);
}

// "admin", "evaluator", or `worker_prefix` and the rank.
std::string RoleName(const PeerIdentity& identity, std::string_view worker_prefix) {
  switch (identity.role) {
    case PeerIdentity::Role::kAdmin:
      return "admin";
    case PeerIdentity::Role::kEvaluator:
      return "evaluator";
    default:
      return std::string(worker_prefix) + std::to_string(identity.worker);
  }
}

std::string Who(const PeerIdentity& identity) {
  return identity.role == PeerIdentity::Role::kWorker ? RoleName(identity, kWorkerPrefix)
                                                      : "the " + RoleName(identity, "");
}

}  // namespace

PeerIdentity IdentityOf(uint32_t worker) {
  switch (worker) {
    case kControlWorker:
      return {PeerIdentity::Role::kAdmin, 0};
    case kEvaluatorWorker:
      return {PeerIdentity::Role::kEvaluator, 0};
    default:
      return {PeerIdentity::Role::kWorker, worker};
  }
}

std::string UserId(const PeerIdentity& identity) { return RoleName(identity, kWorkerPrefix); }

StatusOr<PeerIdentity> ParseUserId(std::string_view user_id) {
  if (user_id == "admin") return PeerIdentity{PeerIdentity::Role::kAdmin, 0};
  if (user_id == "evaluator") return PeerIdentity{PeerIdentity::Role::kEvaluator, 0};
  if (user_id.substr(0, kWorkerPrefix.size()) == kWorkerPrefix) {
    const std::string_view digits = user_id.substr(kWorkerPrefix.size());
    uint32_t rank = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty()) {
      return PeerIdentity{PeerIdentity::Role::kWorker, rank};
    }
  }
  return InvalidArgumentError("not a user id of this job: " + Quote(user_id));
}

std::string KeyName(const PeerIdentity& identity) { return RoleName(identity, "worker-"); }

StatusOr<std::string> ReadKeyFile(const std::string& path, bool secret) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return NotFoundError("key file " + path +
                           " does not exist: make the job's keys with `ps_ctl keygen --config "
                           "<job.yaml>` and give this host the files of its role");
    }
    return PermissionDeniedError("cannot read key file " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError("key file " + path + " is not a file");
  if (secret && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return PermissionDeniedError("secret key file " + path + " has mode " + mode +
                                 ": group or others can read it; run `chmod 600 " + path +
                                 "` (and check who could have copied it)");
  }
  std::ifstream in(path);
  if (!in) return PermissionDeniedError("cannot read key file " + path + ": " + std::strerror(errno));
  std::string line, key;
  int keys = 0;
  // A key file is small; a big one is not a key file.
  for (int lines = 0; std::getline(in, line) && lines < 64; ++lines) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    key = line;
    ++keys;
  }
  if (keys != 1 || !IsCurveKey(key)) {
    return InvalidArgumentError("key file " + path +
                                " does not hold one key (a line of 40 Z85 characters after '#' "
                                "comments): write it again with `ps_ctl keygen`");
  }
  return key;
}

StatusOr<CurveOptions> ServerCurve(const JobOptions& job) {
  CurveOptions curve;
  if (job.security.mode != SecurityMode::kCurve) return curve;
  curve.server = true;
  PS_ASSIGN_OR_RETURN(curve.secret_key,
                      ReadKeyFile(KeyPath(job.security.keys_dir, kServerKeyName, ".secret"), true));
  PS_ASSIGN_OR_RETURN(curve.public_key, CurvePublicKey(curve.secret_key));
  return curve;
}

StatusOr<ZapHandler::Allowlist> ServerAllowlist(const JobOptions& job) {
  ZapHandler::Allowlist allowed;
  const std::string& dir = job.security.keys_dir;
  auto add = [&](const std::string& path, const PeerIdentity& identity) -> Status {
    PS_ASSIGN_OR_RETURN(std::string key, ReadKeyFile(path, false));
    auto [it, inserted] = allowed.emplace(key, UserId(identity));
    if (!inserted && it->second != UserId(identity)) {
      return InvalidArgumentError("key file " + path + " holds the same key as that of " +
                                  it->second + ": each identity needs a key of its own; make "
                                  "the keys again with `ps_ctl keygen`");
    }
    return Status::Ok();
  };
  for (uint32_t r = 0; r < job.cluster.workers; ++r) {
    const PeerIdentity worker{PeerIdentity::Role::kWorker, r};
    PS_RETURN_IF_ERROR(add(KeyPath(dir, KeyName(worker), ".public"), worker));
    const std::string previous = KeyPath(dir, KeyName(worker), ".previous.public");
    if (fs::exists(previous)) PS_RETURN_IF_ERROR(add(previous, worker));
  }
  const PeerIdentity admin{PeerIdentity::Role::kAdmin, 0};
  PS_RETURN_IF_ERROR(add(KeyPath(dir, KeyName(admin), ".public"), admin));
  if (job.cluster.evaluator) {
    const PeerIdentity evaluator{PeerIdentity::Role::kEvaluator, 0};
    PS_RETURN_IF_ERROR(add(KeyPath(dir, KeyName(evaluator), ".public"), evaluator));
  }
  return allowed;
}

StatusOr<CurveOptions> ClientCurve(const JobOptions& job, uint32_t worker) {
  CurveOptions curve;
  if (job.security.mode != SecurityMode::kCurve) return curve;
  const std::string& dir = job.security.keys_dir;
  const PeerIdentity identity = IdentityOf(worker);
  PS_ASSIGN_OR_RETURN(curve.server_key,
                      ReadKeyFile(KeyPath(dir, kServerKeyName, ".public"), false));
  PS_ASSIGN_OR_RETURN(curve.secret_key, ReadKeyFile(KeyPath(dir, KeyName(identity), ".secret"), true));
  PS_ASSIGN_OR_RETURN(curve.public_key, CurvePublicKey(curve.secret_key));
  return curve;
}

Status CheckSender(const PeerIdentity& identity, std::string_view op_name, bool admin_op,
                   uint32_t worker) {
  if (identity.role == PeerIdentity::Role::kAdmin) {
    if (admin_op && worker == kControlWorker) return Status::Ok();
    return PermissionDeniedError("the admin key may send only STATS, CHECKPOINT and SHUTDOWN as "
                                 "the control client; refused " + std::string(op_name) +
                                 (worker == kControlWorker ? std::string()
                                                           : " as worker " + std::to_string(worker)));
  }
  if (identity.role == PeerIdentity::Role::kEvaluator) {
    // What the evaluator may send at all is DecodeRequest's to say.
    if (!admin_op && worker == kEvaluatorWorker) return Status::Ok();
    return PermissionDeniedError("the evaluator's key may speak only as the evaluator, and "
                                 "never send STATS, CHECKPOINT or SHUTDOWN; refused " +
                                 std::string(op_name) +
                                 (worker == kEvaluatorWorker ? std::string()
                                  : worker == kControlWorker
                                      ? std::string(" as the control client")
                                      : " as worker " + std::to_string(worker)));
  }
  if (admin_op) {
    return PermissionDeniedError(Who(identity) + "'s key may not send " + std::string(op_name) +
                                 ": only the admin key (ps_ctl) may stop, checkpoint or inspect "
                                 "a server");
  }
  if (worker != identity.worker) {
    return PermissionDeniedError(
        Who(identity) + "'s key may speak only as worker " + std::to_string(identity.worker) +
        "; refused " + std::string(op_name) + " in the name of " +
        (worker == kControlWorker     ? std::string("the control client")
         : worker == kEvaluatorWorker ? std::string("the evaluator")
                                      : "worker " + std::to_string(worker)));
  }
  return Status::Ok();
}

Status WriteJobKeys(const std::string& dir, uint32_t workers, bool overwrite) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return PermissionDeniedError("cannot make the keys folder " + dir + ": " + ec.message());
  // The folder holds secrets: nobody else may list or enter it.
  if (::chmod(dir.c_str(), 0700) != 0) {
    return PermissionDeniedError("cannot set mode 0700 on " + dir + ": " + std::strerror(errno));
  }
  const std::string server_secret = KeyPath(dir, kServerKeyName, ".secret");
  if (!overwrite && fs::exists(server_secret)) {
    return FailedPreconditionError(dir + " holds a job's keys already (" + server_secret +
                                   "); pass --force to replace them all, or --rotate <rank> to "
                                   "replace one worker's");
  }
  PS_RETURN_IF_ERROR(WritePair(dir, std::string(kServerKeyName), "the job's servers"));
  for (uint32_t r = 0; r < workers; ++r) {
    const PeerIdentity worker{PeerIdentity::Role::kWorker, r};
    PS_RETURN_IF_ERROR(WritePair(dir, KeyName(worker), Who(worker)));
    ::unlink(KeyPath(dir, KeyName(worker), ".previous.public").c_str());
  }
  const PeerIdentity evaluator{PeerIdentity::Role::kEvaluator, 0};
  PS_RETURN_IF_ERROR(WritePair(dir, KeyName(evaluator), Who(evaluator)));
  const PeerIdentity admin{PeerIdentity::Role::kAdmin, 0};
  return WritePair(dir, KeyName(admin), Who(admin));
}

Status RotateWorkerKey(const std::string& dir, uint32_t worker) {
  const PeerIdentity identity{PeerIdentity::Role::kWorker, worker};
  const std::string current = KeyPath(dir, KeyName(identity), ".public");
  PS_ASSIGN_OR_RETURN(std::string key, ReadKeyFile(current, false));
  PS_RETURN_IF_ERROR(WriteKeyFile(KeyPath(dir, KeyName(identity), ".previous.public"),
                                  "# previous CurveZMQ public key of " + Who(identity) +
                                      ", let in until this file is removed\n" + key + "\n",
                                  0644));
  return WritePair(dir, KeyName(identity), Who(identity));
}

}  // namespace ps
