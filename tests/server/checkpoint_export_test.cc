// ps_ctl export's library: a 2-shard checkpoint written by the real writer
// (tests/util/test_checkpoint.h) exported, its .npy files parsed here and
// compared bit for bit with the snapshots; the manifest read back with
// nlohmann/json (a test-only use); every error an export names.
#include "server/checkpoint_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/util/status_matchers.h"
#include "tests/util/test_checkpoint.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A parsed .npy file: its header dict and its data.
struct Npy {
  std::string dict;
  std::string data;
};

// Parses a .npy version 1.0 file as numpy's format doc describes it.
Npy ParseNpy(const fs::path& p) {
  const std::string bytes = ReadAll(p);
  Npy npy;
  EXPECT_GE(bytes.size(), 10u) << p;
  if (bytes.size() < 10) return npy;
  EXPECT_EQ(bytes.substr(0, 6), std::string("\x93NUMPY", 6)) << p;
  EXPECT_EQ(bytes[6], 1) << p;
  EXPECT_EQ(bytes[7], 0) << p;
  const size_t len = static_cast<unsigned char>(bytes[8]) |
                     (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  EXPECT_EQ((10 + len) % 64, 0u) << p << ": the data is not 64-byte aligned";
  npy.dict = bytes.substr(10, len);
  EXPECT_EQ(npy.dict.back(), '\n') << p;
  npy.data = bytes.substr(10 + len);
  // The dict as numpy writes it, with the padding taken off.
  npy.dict = npy.dict.substr(0, npy.dict.find_last_not_of(" \n") + 1);
  return npy;
}

std::string Dict(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

class CheckpointExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("checkpoint_export_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ckpt_ = (dir_ / "ckpt").string();
    out_ = (dir_ / "out").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The whole table `t` at `clock` as the export must write it: range rows
  // in row order, hashed rows in id order. Array k: 0 values, 1.. slots.
  std::string Expected(int64_t clock, size_t t, size_t k, uint32_t shards = 2) {
    std::map<uint64_t, std::string> rows;  // row or id -> bytes
    for (uint32_t s = 0; s < shards; ++s) {
      const ShardSnapshot snap = TestCheckpointShard(s, shards, clock, false);
      const TableSnapshot& table = snap.tables[t];
      const std::vector<float>& a = k == 0 ? table.values : table.slots[k - 1];
      for (uint64_t i = 0; i < table.RowCount(); ++i) {
        const uint64_t key = table.hashed ? table.ids[i] : table.owned.begin + i;
        rows[key] = std::string(reinterpret_cast<const char*>(a.data() + i * table.dim),
                                table.dim * sizeof(float));
      }
    }
    std::string all;
    for (const auto& [key, bytes] : rows) all += bytes;
    return all;
  }

  fs::path dir_;
  std::string ckpt_, out_;
};

TEST_F(CheckpointExportTest, ExportsEveryTableBitForBit) {
  ASSERT_OK(WriteTestCheckpoint(ckpt_, 2, 8, false));
  std::vector<std::string> lines;
  ExportOptions o;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  auto done = ExportCheckpoint(ckpt_, out_, o);
  ASSERT_OK(done);
  EXPECT_EQ(done->clock, 8);
  EXPECT_EQ(done->num_shards, 2u);
  EXPECT_EQ(done->tables, 4u);
  // values + 2 slots, values, values + 1 slot, ids + values + 2 slots, manifest.
  EXPECT_EQ(done->files.size(), 3u + 1u + 2u + 4u + 1u);
  EXPECT_EQ(done->files.back(), "manifest.json");
  EXPECT_FALSE(lines.empty());

  // emb: 1000 x 8 under adam.
  for (const auto& [file, k] : std::vector<std::pair<std::string, size_t>>{
           {"emb.values.npy", 0}, {"emb.first_moment.npy", 1}, {"emb.second_moment.npy", 2}}) {
    const Npy npy = ParseNpy(fs::path(out_) / file);
    EXPECT_EQ(npy.dict, Dict("<f4", "(1000, 8)")) << file;
    EXPECT_TRUE(npy.data == Expected(8, 0, k)) << file << " differs from the snapshots";
  }
  const Npy bias = ParseNpy(fs::path(out_) / "w.bias.values.npy");
  EXPECT_EQ(bias.dict, Dict("<f4", "(10, 1)"));
  EXPECT_TRUE(bias.data == Expected(8, 1, 0));
  EXPECT_FALSE(fs::exists(fs::path(out_) / "w.bias.momentum.npy"));
  for (const auto& [file, k] : std::vector<std::pair<std::string, size_t>>{
           {"long.values.npy", 0}, {"long.momentum.npy", 1}}) {
    const Npy npy = ParseNpy(fs::path(out_) / file);
    EXPECT_EQ(npy.dict, Dict("<f4", "(40000, 1)")) << file;
    EXPECT_TRUE(npy.data == Expected(8, 2, k)) << file << " differs from the snapshots";
  }

  // The hashed table: ids ascending, rows in their order, the name encoded.
  const std::string stem = "user%20ids%2Fv2";
  std::vector<uint64_t> ids;
  for (uint32_t s = 0; s < 2; ++s) {
    const ShardSnapshot snap = TestCheckpointShard(s, 2, 8, false);
    ASSERT_FALSE(snap.tables[3].ids.empty()) << "shard " << s << " holds no id of the test";
    ids.insert(ids.end(), snap.tables[3].ids.begin(), snap.tables[3].ids.end());
  }
  std::sort(ids.begin(), ids.end());
  const Npy ids_npy = ParseNpy(fs::path(out_) / (stem + ".ids.npy"));
  EXPECT_EQ(ids_npy.dict, Dict("<u8", "(" + std::to_string(ids.size()) + ",)"));
  EXPECT_TRUE(ids_npy.data == Bytes(ids));
  const std::string shape = "(" + std::to_string(ids.size()) + ", 4)";
  for (const auto& [file, k] : std::vector<std::pair<std::string, size_t>>{
           {".values.npy", 0}, {".z.npy", 1}, {".n.npy", 2}}) {
    const Npy npy = ParseNpy(fs::path(out_) / (stem + file));
    EXPECT_EQ(npy.dict, Dict("<f4", shape)) << file;
    EXPECT_TRUE(npy.data == Expected(8, 3, k)) << stem + file << " differs from the snapshots";
  }

  const nlohmann::json m = nlohmann::json::parse(ReadAll(fs::path(out_) / "manifest.json"));
  EXPECT_EQ(m["format"], "ps-checkpoint-export");
  EXPECT_EQ(m["format_version"], 1);
  EXPECT_EQ(m["clock"], 8);
  EXPECT_EQ(m["num_shards"], 2);
  EXPECT_EQ(m["fingerprint"], "test-model-fingerprint");
  ASSERT_EQ(m["tables"].size(), 4u);
  const nlohmann::json& emb = m["tables"][0];
  EXPECT_EQ(emb["name"], "emb");
  EXPECT_EQ(emb["kind"], "range");
  EXPECT_EQ(emb["rows"], 1000);
  EXPECT_EQ(emb["dim"], 8);
  EXPECT_EQ(emb["optimizer"], "adam");
  EXPECT_EQ(emb["optimizer_settings"], "adam lr=0.01 beta1=0.9");
  EXPECT_EQ(emb["slots"], nlohmann::json({"first_moment", "second_moment"}));
  EXPECT_EQ(emb["dtype"], "float32");
  EXPECT_EQ(emb["shape"], nlohmann::json({1000, 8}));
  EXPECT_EQ(emb["files"]["values"], "emb.values.npy");
  EXPECT_EQ(emb["files"]["state"]["second_moment"], "emb.second_moment.npy");
  EXPECT_FALSE(emb["files"].contains("ids"));
  EXPECT_EQ(emb["rows_per_shard"], nlohmann::json({500, 500}));
  const nlohmann::json& h = m["tables"][3];
  EXPECT_EQ(h["name"], kTestHashedName);
  EXPECT_EQ(h["kind"], "hashed");
  EXPECT_EQ(h["rows"], ids.size());
  EXPECT_EQ(h["hash_slots"], 64);
  EXPECT_EQ(h["ids_dtype"], "uint64");
  EXPECT_EQ(h["files"]["ids"], stem + ".ids.npy");
  EXPECT_EQ(h["files"]["state"]["z"], stem + ".z.npy");
  EXPECT_EQ(h["rows_per_shard"][0].get<uint64_t>() + h["rows_per_shard"][1].get<uint64_t>(),
            ids.size());
  // Every file the manifest names exists, and no other but the manifest.
  size_t named = 0;
  for (const auto& t : m["tables"]) {
    named += 1 + t["files"]["state"].size() + (t["files"].contains("ids") ? 1 : 0);
    EXPECT_TRUE(fs::exists(fs::path(out_) / t["files"]["values"].get<std::string>()));
  }
  size_t there = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(out_)) ++there;
  EXPECT_EQ(there, named + 1);
}

TEST_F(CheckpointExportTest, DefaultsToTheNewestClockEveryShardHoldsAndTakesAnOlderOne) {
  ASSERT_OK(WriteTestCheckpoint(ckpt_, 2, 4, false, /*seed=*/4));
  ASSERT_OK(WriteTestCheckpoint(ckpt_, 2, 8, false, /*seed=*/8));
  // Generation 12 on shard 0 alone: not complete everywhere.
  auto dir = CheckpointDir::Open(ShardCheckpointDir(ckpt_, 0));
  ASSERT_OK(dir);
  ASSERT_OK((*dir)->Write(TestCheckpointShard(0, 2, 12, false), CheckpointWriteOptions{}));

  auto newest = CheckpointArrays::Open(ckpt_, std::nullopt);
  ASSERT_OK(newest);
  EXPECT_EQ((*newest)->generation().clock, 8);

  ExportOptions o;
  o.clock = 4;
  auto done = ExportCheckpoint(ckpt_, out_, o);
  ASSERT_OK(done);
  EXPECT_EQ(done->clock, 4);
  const Npy npy = ParseNpy(fs::path(out_) / "emb.values.npy");
  std::string want;
  for (uint32_t s = 0; s < 2; ++s)
    want += Bytes(TestCheckpointShard(s, 2, 4, false, 4).tables[0].values);
  EXPECT_TRUE(npy.data == want) << "the export is not generation 4's";
}

TEST_F(CheckpointExportTest, ReadsOneShardAndThreeShards) {
  for (uint32_t shards : {1u, 3u}) {
    const std::string ckpt = ckpt_ + std::to_string(shards);
    const std::string out = out_ + std::to_string(shards);
    ASSERT_OK(WriteTestCheckpoint(ckpt, shards, 2, false));
    ASSERT_OK(ExportCheckpoint(ckpt, out, {}));
    for (size_t k = 0; k < 3; ++k) {
      const std::string file = k == 0 ? ".values.npy" : k == 1 ? ".z.npy" : ".n.npy";
      EXPECT_TRUE(ParseNpy(fs::path(out) / ("user%20ids%2Fv2" + file)).data ==
                  Expected(2, 3, k, shards))
          << shards << " shards, " << file;
    }
    EXPECT_TRUE(ParseNpy(fs::path(out) / "emb.values.npy").data == Expected(2, 0, 0, shards));
  }
}

TEST_F(CheckpointExportTest, NamesAFolderThatIsMissingOrNotACheckpoint) {
  auto missing = ExportCheckpoint(ckpt_ + "/nope", out_, {});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(ckpt_ + "/nope: no such folder"), std::string::npos)
      << missing.status().ToString();
  EXPECT_FALSE(fs::exists(ckpt_ + "/nope")) << "an export must create nothing in the checkpoint";
  EXPECT_FALSE(fs::exists(out_));

  std::ofstream(dir_ / "file") << "x";
  auto file = ExportCheckpoint((dir_ / "file").string(), out_, {});
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument) << file.status().ToString();

  fs::create_directories(ckpt_);
  auto empty = ExportCheckpoint(ckpt_, out_, {});
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_NE(empty.status().message().find("holds no shard-<i> folder"), std::string::npos)
      << empty.status().ToString();
}

TEST_F(CheckpointExportTest, NamesAMissingShardFolder) {
  ASSERT_OK(WriteTestCheckpoint(ckpt_, 3, 8, false));
  fs::rename(ckpt_ + "/shard-1", dir_ / "aside");
  auto gap = ExportCheckpoint(ckpt_, out_, {});
  EXPECT_EQ(gap.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gap.status().message().find(ckpt_ + "/shard-1 is missing"), std::string::npos)
      << gap.status().ToString();
  fs::rename(dir_ / "aside", ckpt_ + "/shard-1");

  fs::remove_all(ckpt_ + "/shard-2");
  auto last = ExportCheckpoint(ckpt_, out_, {});
  EXPECT_EQ(last.status().code(), StatusCode::kNotFound);
  EXPECT_NE(last.status().message().find(ckpt_ + "/shard-2 is missing: generation 8 was written "
                                                 "by 3 shards"),
            std::string::npos)
      << last.status().ToString();
}

TEST_F(CheckpointExportTest, NamesWhatEachShardHoldsWhenNoGenerationIsCommon) {
  auto d0 = CheckpointDir::Open(ShardCheckpointDir(ckpt_, 0));
  auto d1 = CheckpointDir::Open(ShardCheckpointDir(ckpt_, 1));
  ASSERT_OK(d0);
  ASSERT_OK(d1);
  ASSERT_OK((*d0)->Write(TestCheckpointShard(0, 2, 4, false), CheckpointWriteOptions{}));
  ASSERT_OK((*d1)->Write(TestCheckpointShard(1, 2, 8, false), CheckpointWriteOptions{}));
  auto none = ExportCheckpoint(ckpt_, out_, {});
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no generation is complete in every shard's folder "
                                         "(complete generations; shard-0: 4; shard-1: 8)"),
            std::string::npos)
      << none.status().ToString();

  ExportOptions o;
  o.clock = 8;
  auto absent = ExportCheckpoint(ckpt_, out_, o);
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_NE(absent.status().message().find("generation 8 is not complete in every shard's folder"),
            std::string::npos)
      << absent.status().ToString();
  EXPECT_FALSE(fs::exists(out_));
}

TEST_F(CheckpointExportTest, PassesOnTheDataLossOfACorruptGeneration) {
  ASSERT_OK(WriteTestCheckpoint(ckpt_, 2, 8, false));
  const fs::path gen = fs::path(ckpt_) / "shard-1" / "gen-8";
  bool flipped = false;
  for (const auto& e : fs::directory_iterator(gen)) {
    if (e.path().extension() != ".sst") continue;
    // Every byte of the second half inverted: the blocks' checksums fail.
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(e.path()));
    std::string bytes(static_cast<size_t>(size / 2), '\0');
    f.seekg(size / 4);
    f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    for (char& c : bytes) c = static_cast<char>(~c);
    f.seekp(size / 4);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    flipped = true;
  }
  ASSERT_TRUE(flipped) << "no .sst file in " << gen;
  auto corrupt = ExportCheckpoint(ckpt_, out_, {});
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss) << corrupt.status().ToString();
  EXPECT_NE(corrupt.status().message().find(gen.string()), std::string::npos)
      << corrupt.status().ToString();
  EXPECT_FALSE(fs::exists(fs::path(out_) / "manifest.json"))
      << "a failed export must not look complete";
}

TEST_F(CheckpointExportTest, RefusesShardFoldersOfAnotherJob) {
  ASSERT_OK(WriteTestCheckpoint(ckpt_, 2, 8, false));
  ShardSnapshot other = TestCheckpointShard(1, 2, 8, false);
  other.fingerprint = "another-model";
  auto d1 = CheckpointDir::Open(ShardCheckpointDir(ckpt_, 1));
  ASSERT_OK(d1);
  ASSERT_OK((*d1)->Write(other, CheckpointWriteOptions{}));
  auto fingerprint = ExportCheckpoint(ckpt_, out_, {});
  EXPECT_EQ(fingerprint.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(fingerprint.status().message().find("written for another model"), std::string::npos)
      << fingerprint.status().ToString();

  // Shard 1 of a 3-shard split: rows overlap or are left out.
  ShardSnapshot split = TestCheckpointShard(1, 2, 8, false);
  split.tables[0].owned = {400, 1000};
  split.tables[0].values.assign(600 * 8, 0.0f);
  for (auto& s : split.tables[0].slots) s.assign(600 * 8, 0.0f);
  ASSERT_OK((*d1)->Write(split, CheckpointWriteOptions{}));
  auto overlap = ExportCheckpoint(ckpt_, out_, {});
  EXPECT_EQ(overlap.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(overlap.status().message().find("table 'emb': shard-0 and shard-1 both hold its rows "
                                            "from 400"),
            std::string::npos)
      << overlap.status().ToString();
}

TEST_F(CheckpointExportTest, RefusesAFolderWithFilesUnlessForced) {
  ASSERT_OK(WriteTestCheckpoint(ckpt_, 2, 8, false));
  fs::create_directories(out_);
  std::ofstream(fs::path(out_) / "notes.txt") << "mine";
  auto refused = ExportCheckpoint(ckpt_, out_, {});
  EXPECT_EQ(refused.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find(out_ + ": holds 1 entries (notes.txt)"),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("--force"), std::string::npos);

  ExportOptions o;
  o.force = true;
  ASSERT_OK(ExportCheckpoint(ckpt_, out_, o));
  EXPECT_TRUE(fs::exists(fs::path(out_) / "notes.txt"));
  EXPECT_TRUE(fs::exists(fs::path(out_) / "manifest.json"));
  ASSERT_OK(ExportCheckpoint(ckpt_, out_, o)) << "a second forced export over the first";

  std::ofstream(dir_ / "a_file") << "x";
  auto not_folder = ExportCheckpoint(ckpt_, (dir_ / "a_file").string(), {});
  EXPECT_EQ(not_folder.status().code(), StatusCode::kInvalidArgument)
      << not_folder.status().ToString();
}

TEST(ExportFileStemTest, KeepsSafeCharactersAndEncodesTheRest) {
  EXPECT_EQ(ExportFileStem("emb_1-a.b"), "emb_1-a.b");
  EXPECT_EQ(ExportFileStem("a/b c"), "a%2Fb%20c");
  EXPECT_EQ(ExportFileStem(".hidden"), "%2Ehidden");
  EXPECT_EQ(ExportFileStem("100%"), "100%25");
  EXPECT_EQ(ExportFileStem("\xc3\xa9"), "%C3%A9");
}

TEST(NpyHeaderTest, IsVersionOnePaddedToSixtyFourBytes) {
  const uint64_t two[] = {3, 4};
  const std::string h = NpyHeader("<f4", two);
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(static_cast<size_t>(static_cast<unsigned char>(h[8])) + 10, h.size());
  EXPECT_EQ(h.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"), 10u);
  EXPECT_EQ(h.back(), '\n');
  const uint64_t one[] = {7};
  EXPECT_NE(NpyHeader("<u8", one).find("'shape': (7,), }"), std::string::npos);
}

}  // namespace
}  // namespace ps
