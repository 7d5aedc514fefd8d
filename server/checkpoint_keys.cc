// The keys of a checkpoint generation's records (server/checkpoint_format.h):
// a tag byte, then big-endian integers, so that keys sort by table, then
// row, or slot and id.
#include <cstdint>
#include <string>
#include <string_view>

#include "server/checkpoint_format.h"

namespace ps {
namespace {

constexpr char kRowTag = 'r';
constexpr char kIdTag = 'h';
constexpr char kSketchTag = 'a';
constexpr char kPatchTag = 'p';

void PutBigEndian(char* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

uint64_t GetBigEndian(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

}  // namespace

namespace {

// A record key: `tag`, the table index (u32) and a row or id (u64), both
// big-endian.
void EncodeKey(char tag, uint32_t table, uint64_t n, char out[kRowKeySize]) {
  out[0] = tag;
  PutBigEndian(out + 1, table, 4);
  PutBigEndian(out + 5, n, 8);
}

std::string Key(char tag, uint32_t table, uint64_t n) {
  std::string key(kRowKeySize, '\0');
  EncodeKey(tag, table, n, key.data());
  return key;
}

bool DecodeKey(char tag, std::string_view key, uint32_t* table, uint64_t* n) {
  if (key.size() != kRowKeySize || key[0] != tag) return false;
  *table = static_cast<uint32_t>(GetBigEndian(key.data() + 1, 4));
  *n = GetBigEndian(key.data() + 5, 8);
  return true;
}

}  // namespace

void EncodeRowKey(uint32_t table, uint64_t row, char out[kRowKeySize]) {
  EncodeKey(kRowTag, table, row, out);
}
std::string RowKey(uint32_t table, uint64_t row) { return Key(kRowTag, table, row); }
bool DecodeRowKey(std::string_view key, uint32_t* table, uint64_t* row) {
  return DecodeKey(kRowTag, key, table, row);
}

void EncodeIdKey(uint32_t table, uint32_t slot, uint64_t id, char out[kIdKeySize]) {
  out[0] = kIdTag;
  PutBigEndian(out + 1, table, 4);
  PutBigEndian(out + 5, slot, 4);
  PutBigEndian(out + 9, id, 8);
}
std::string IdKey(uint32_t table, uint32_t slot, uint64_t id) {
  std::string key(kIdKeySize, '\0');
  EncodeIdKey(table, slot, id, key.data());
  return key;
}
bool DecodeIdKey(std::string_view key, uint32_t* table, uint32_t* slot, uint64_t* id) {
  if (key.size() == kRowKeySize) {  // version 4: no slot
    *slot = kNoSlotInKey;
    return DecodeKey(kIdTag, key, table, id);
  }
  if (key.size() != kIdKeySize || key[0] != kIdTag) return false;
  *table = static_cast<uint32_t>(GetBigEndian(key.data() + 1, 4));
  *slot = static_cast<uint32_t>(GetBigEndian(key.data() + 5, 4));
  *id = GetBigEndian(key.data() + 9, 8);
  return true;
}
std::string SlotKey(uint32_t table, uint32_t slot) {
  std::string key(1 + 4 + 4, '\0');
  key[0] = kIdTag;
  PutBigEndian(key.data() + 1, table, 4);
  PutBigEndian(key.data() + 5, slot, 4);
  return key;
}
std::string IdKeyV4(uint32_t table, uint64_t id) { return Key(kIdTag, table, id); }

std::string PatchKey(uint32_t table, uint64_t row) { return Key(kPatchTag, table, row); }
bool DecodePatchKey(std::string_view key, uint32_t* table, uint64_t* row) {
  return DecodeKey(kPatchTag, key, table, row);
}

std::string SketchKey(uint32_t table) { return Key(kSketchTag, table, 0); }
bool DecodeSketchKey(std::string_view key, uint32_t* table) {
  uint64_t zero = 0;
  return DecodeKey(kSketchTag, key, table, &zero) && zero == 0;
}

}  // namespace ps
