// Test helper: a checkpoint meta record as an older format version wrote
// it (server/checkpoint_format.h), to check that this build still reads
// generations written before the format changed.
#ifndef PS_TESTS_UTIL_OLDER_CHECKPOINT_H_
#define PS_TESTS_UTIL_OLDER_CHECKPOINT_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/checkpoint_format.h"

namespace ps {

// The meta record of `s` in format 5 (without the generation id, base
// clock and base id, and each table's delta fields), 4 (also without each
// table's settings field) or 3 (also without each hashed table's row uses
// field). REQUIRES: `s` is full; for format 4 or older no table of `s` has
// settings (format 4 has none to keep).
inline std::string OlderMeta(const ShardSnapshot& s, uint32_t version) {
  std::string meta = EncodeMeta(s);
  meta[4] = static_cast<char>(version);
  // The fields to cut (where, bytes), in order.
  std::vector<std::pair<size_t, size_t>> cuts;
  size_t at = 4 + 4 + 4 + 4 + 8 + 4 + s.fingerprint.size();
  cuts.push_back({at, 8 + 8 + 8});  // generation id, base clock, base id
  at += 8 + 8 + 8 + 4;
  for (const TableSnapshot& t : s.tables) {
    at += 4 + t.name.size() + 8 + 4 + 8 + 8 + 4 + t.optimizer.size() + 4 + 4;
    if (t.hashed) {
      at += 4 + 8 + 4;
      if (version < 4) cuts.push_back({at, 4});  // row uses
      at += 4;
    }
    if (version < 5) {
      EXPECT_TRUE(t.settings.empty()) << t.name;
      cuts.push_back({at, 4});  // settings (empty: its length alone)
    }
    at += 4 + t.settings.size();
    cuts.push_back({at, 8 + 8});  // delta records and removed
    at += 8 + 8;
  }
  EXPECT_EQ(at, meta.size());
  for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) meta.erase(it->first, it->second);
  return meta;
}

}  // namespace ps

#endif  // PS_TESTS_UTIL_OLDER_CHECKPOINT_H_
