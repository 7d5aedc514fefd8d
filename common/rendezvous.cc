#include "common/rendezvous.h"

#include <cstdint>

#include <fmt/format.h>

#include "common/text.h"

namespace ps {

std::vector<AgreedField> AgreedFields(const JobOptions& job) {
  std::vector<AgreedField> fields = {
      {"shards", std::to_string(job.cluster.servers.size())},
      {"workers", std::to_string(job.cluster.workers)},
      {"consistency",
       ConsistencyName(job.consistency) + (job.consistency.aggregate ? " aggregate" : "") +
           (job.consistency.backup_workers > 0
                ? " backup_workers " + std::to_string(job.consistency.backup_workers)
                : "")},
      {"tables", std::to_string(job.tables.size())},
      {"replication.factor", std::to_string(job.replication.factor)},
  };
  for (size_t i = 0; i < job.tables.size(); ++i) {
    const TableOptions& t = job.tables[i];
    const std::string path = "tables[" + std::to_string(i) + "]";
    fields.push_back({path, t.Shape()});
    fields.push_back({path + ".optimizer", OptimizerDescription(t.optimizer)});
    fields.push_back({path + ".wire", "pull=" + std::string(NameOf(kWireTypeNames, t.wire.pull)) +
                                          " push=" +
                                          std::string(NameOf(kWireTypeNames, t.wire.push))});
  }
  return fields;
}

std::string EncodeAgreement(const JobOptions& job) {
  std::string text;
  for (const AgreedField& f : AgreedFields(job)) text += f.name + "=" + f.value + "\n";
  return text;
}

std::string AgreementFingerprint(std::string_view encoded) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : encoded) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

namespace {

// The "name=value" lines of an encoded agreement; false when a line has no
// '=' (not an agreement).
bool SplitAgreement(std::string_view text, std::vector<AgreedField>* out) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) return false;
    out->push_back({std::string(line.substr(0, eq)), std::string(line.substr(eq + 1))});
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return true;
}

}  // namespace

Status CompareAgreement(std::string_view mine, std::string_view theirs, std::string_view me,
                        std::string_view them) {
  if (mine == theirs) return Status::Ok();
  std::vector<AgreedField> a, b;
  if (!SplitAgreement(mine, &a) || !SplitAgreement(theirs, &b)) {
    return InvalidArgumentError(std::string(them) + " sent a job description that is not one (" +
                                Quote(theirs) + "): is it a process of another version?");
  }
  const auto mismatch = [&](const std::string& field, std::string_view mine_value,
                            std::string_view their_value) {
    return FailedPreconditionError(
        "job mismatch: " + field + ": " + std::string(me) + " has " + Quote(mine_value) + ", " +
        std::string(them) + " has " + Quote(their_value) +
        "; every server and worker of a job must load the same job file (or files that agree "
        "on the model, the shard and worker counts and the consistency model)");
  };
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size()) return mismatch(b[i].name, "no such field", b[i].value);
    if (i >= b.size()) return mismatch(a[i].name, a[i].value, "no such field");
    if (a[i].name != b[i].name) return mismatch(a[i].name, a[i].value, "no such field");
    if (a[i].value != b[i].value) return mismatch(a[i].name, a[i].value, b[i].value);
  }
  return Status::Ok();  // same fields, different spelling of the text: agreed
}

}  // namespace ps
