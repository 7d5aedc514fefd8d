// What every process of one job must agree on, checked at start-up before
// clock 0 (DESIGN.md section 12): each worker sends its view of the job to
// every server (a HELLO request) and a server refuses a worker whose view
// differs, naming the field and both values. Addresses, limits and timeouts
// may differ between hosts; the model, the shard and worker counts and the
// consistency model may not.
#ifndef PS_COMMON_RENDEZVOUS_H_
#define PS_COMMON_RENDEZVOUS_H_

#include <string>
#include <string_view>
#include <vector>

#include "common/options.h"
#include "common/status.h"

namespace ps {

// One thing that must agree: a YAML-like path and its value as text.
struct AgreedField {
  std::string name;   // "workers", "consistency", "tables[1].optimizer"
  std::string value;  // "4", "ssp 3", "sgd lr=0.05 ..."
};

// The fields of `job` that every process must agree on, in a fixed order:
// shards, workers, consistency (with aggregation), the table count, then
// each table's name, rows and dim, and its optimizer with every setting.
std::vector<AgreedField> AgreedFields(const JobOptions& job);

// The fields as one text, a "name=value" line each, as a HELLO carries it.
std::string EncodeAgreement(const JobOptions& job);

// 16 hex digits (FNV-1a) of an encoded agreement: the same text gives the
// same fingerprint on every host, so logs of two processes can be compared.
std::string AgreementFingerprint(std::string_view encoded);

// OK when `theirs` (a peer's EncodeAgreement) equals `mine`. Otherwise
// FailedPrecondition naming the first field that differs and both values:
// "job mismatch: workers: shard 0 (host0:7000) has 4, worker 3 has 2; every
// process must load the same job file". A field only one side has (a
// different table count) is reported as missing on the other side; text
// that is not an agreement is InvalidArgument.
Status CompareAgreement(std::string_view mine, std::string_view theirs, std::string_view me,
                        std::string_view them);

}  // namespace ps

#endif  // PS_COMMON_RENDEZVOUS_H_
