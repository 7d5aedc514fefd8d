// The durable-folder steps of checkpoint generations, on real folders (no
// crash: tests/server/checkpoint_crash_test.cc kills a writer between them).
#include "server/durable_dir.h"
#include "tests/util/status_matchers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace ps {
namespace {

namespace fs = std::filesystem;

std::set<std::string> Names(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// The first line of `file` (the tests write one).
std::string Slurp(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

class DurableDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ps_durable_dir_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A folder `name` holding one file "data" with `text`.
  fs::path Folder(const std::string& name, const std::string& text) {
    fs::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "data") << text;
    return dir_ / name;
  }

  OsFilesystem files_;
  fs::path dir_;
};

TEST(GenerationNameTest, OnlyCanonicalDecimalNamesAreGenerations) {
  EXPECT_EQ(GenerationName(0), "gen-0");
  EXPECT_EQ(GenerationName(40), "gen-40");
  EXPECT_EQ(ParseGenerationName("gen-0"), 0);
  EXPECT_EQ(ParseGenerationName("gen-40"), 40);
  EXPECT_EQ(ParseGenerationName("gen-9223372036854775807"), 9223372036854775807);
  for (const char* name : {"gen-", "gen-007", "gen--1", "gen-+1", "gen-4x", "gen-abc",
                           "gen-4.tmp", "gen-9223372036854775808", "Gen-4", "other", ""}) {
    EXPECT_EQ(ParseGenerationName(name), -1) << name;
  }
  EXPECT_TRUE(IsTmpGenerationName("gen-4.tmp"));
  EXPECT_TRUE(IsTmpGenerationName("gen-4.old.tmp"));
  EXPECT_FALSE(IsTmpGenerationName("gen-.tmp"));
  EXPECT_FALSE(IsTmpGenerationName("gen-4"));
  EXPECT_FALSE(IsTmpGenerationName("other.tmp"));
  EXPECT_EQ(TmpName("/a/gen-4"), "/a/gen-4.tmp");
}

TEST_F(DurableDirTest, ListsOnlyCompleteGenerationFoldersInClockOrder) {
  for (const char* name : {"gen-10", "gen-9", "gen-100", "gen-9.tmp", "gen-007", "other"}) {
    fs::create_directories(dir_ / name);
  }
  std::ofstream(dir_ / "gen-8") << "a file, not a folder";
  auto clocks = ListGenerations(files_, dir_.string());
  ASSERT_OK(clocks);
  EXPECT_EQ(*clocks, (std::vector<int64_t>{9, 10, 100}));

  auto missing = ListGenerations(files_, (dir_ / "gone").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot list " + (dir_ / "gone").string()),
            std::string::npos)
      << missing.status().ToString();
}

TEST_F(DurableDirTest, RemovesTornGenerationsOnly) {
  Folder("gen-3", "complete");
  Folder("gen-4.tmp", "torn");
  Folder("gen-2.old.tmp", "replaced");
  std::ofstream(dir_ / "gen-5.tmp") << "a torn file";
  Folder("notes.tmp", "not a generation name");
  ASSERT_OK(RemoveTornGenerations(files_, dir_.string()));
  EXPECT_EQ(Names(dir_), (std::set<std::string>{"gen-3", "notes.tmp"}));
  EXPECT_FALSE(RemoveTornGenerations(files_, (dir_ / "gone").string()).ok());
}

// A folder shared during a reshard in memory: the unfinished generation of
// the other process writing into it (the clocks `spare` names) stays, the
// torn ones of other clocks go.
TEST_F(DurableDirTest, SparesTheUnfinishedGenerationOfTheOtherWriter) {
  Folder("gen-129.tmp", "the shard that handed over writes it");
  Folder("gen-100.tmp", "torn");
  Folder("gen-150.tmp", "torn");
  ASSERT_OK(RemoveTornGenerations(files_, dir_.string(), [](int64_t c) { return c == 129; }));
  EXPECT_EQ(Names(dir_), (std::set<std::string>{"gen-129.tmp"}));
  Folder("gen-150.tmp", "the next map's server writes it");
  Folder("gen-99.tmp", "torn");
  ASSERT_OK(RemoveTornGenerations(files_, dir_.string(), [](int64_t c) { return c > 129; }));
  EXPECT_EQ(Names(dir_), (std::set<std::string>{"gen-150.tmp"}));
}

TEST_F(DurableDirTest, PublishRenamesOrReplacesAtomically) {
  Folder("gen-1.tmp", "first");
  ASSERT_TRUE(PublishGeneration(files_, (dir_ / "gen-1.tmp").string(), (dir_ / "gen-1").string(), true)
                  .ok());
  EXPECT_EQ(Names(dir_), std::set<std::string>{"gen-1"});
  EXPECT_EQ(Slurp(dir_ / "gen-1" / "data"), "first");

  // The same clock again: the new folder replaces the old one, which leaves
  // no trace.
  Folder("gen-1.tmp", "second");
  ASSERT_TRUE(PublishGeneration(files_, (dir_ / "gen-1.tmp").string(), (dir_ / "gen-1").string(), false)
                  .ok());
  EXPECT_EQ(Names(dir_), std::set<std::string>{"gen-1"});
  EXPECT_EQ(Slurp(dir_ / "gen-1" / "data"), "second");

  // Nothing to publish: an error naming both paths; the generation stays.
  const Status missing =
      PublishGeneration(files_, (dir_ / "gen-2.tmp").string(), (dir_ / "gen-2").string(), true);
  EXPECT_EQ(missing.code(), StatusCode::kInternal) << missing.ToString();
  EXPECT_NE(missing.message().find("cannot rename " + (dir_ / "gen-2.tmp").string() + " to " +
                                   (dir_ / "gen-2").string()),
            std::string::npos)
      << missing.ToString();
  EXPECT_EQ(Names(dir_), std::set<std::string>{"gen-1"});
}

TEST_F(DurableDirTest, PruneKeepsTheNewestAndRenamesEachBeforeRemovingIt) {
  for (const char* name : {"gen-5", "gen-10", "gen-20", "gen-30"}) Folder(name, name);
  Folder("other", "kept");
  std::vector<std::string> renamed;
  const auto record = [&](const std::string& doomed) {
    // At the call the generation is only under its .tmp name.
    EXPECT_TRUE(fs::exists(doomed)) << doomed;
    EXPECT_FALSE(fs::exists(doomed.substr(0, doomed.size() - 4))) << doomed;
    renamed.push_back(fs::path(doomed).filename().string());
  };
  ASSERT_OK(PruneGenerations(files_, dir_.string(), 2, true, record));
  EXPECT_EQ(renamed, (std::vector<std::string>{"gen-5.tmp", "gen-10.tmp"}));
  EXPECT_EQ(Names(dir_), (std::set<std::string>{"gen-20", "gen-30", "other"}));

  // Nothing beyond `keep`: nothing happens (and no hook is needed).
  ASSERT_OK(PruneGenerations(files_, dir_.string(), 2, false, nullptr));
  ASSERT_OK(PruneGenerations(files_, dir_.string(), 5, false, nullptr));
  EXPECT_EQ(Names(dir_), (std::set<std::string>{"gen-20", "gen-30", "other"}));
  ASSERT_OK(PruneGenerations(files_, dir_.string(), 1, false, nullptr));
  EXPECT_EQ(Names(dir_), (std::set<std::string>{"gen-30", "other"}));
  EXPECT_FALSE(PruneGenerations(files_, (dir_ / "gone").string(), 1, false, nullptr).ok());
}

TEST_F(DurableDirTest, SyncsFilesAndFoldersAndNamesWhatIsMissing) {
  const fs::path folder = Folder("gen-1.tmp", "data");
  std::ofstream(folder / "more") << "more";
  fs::create_directories(folder / "sub");
  EXPECT_OK(files_.SyncFile((folder / "data").string()));
  EXPECT_OK(files_.SyncDir(folder.string()));
  EXPECT_OK(SyncFlatFolder(files_, folder.string()));

  const std::string gone = (dir_ / "gone").string();
  for (const Status& s : {files_.SyncFile(gone), files_.SyncDir(gone), SyncFlatFolder(files_, gone)}) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(gone), std::string::npos) << s.ToString();
  }
  const Status file_as_dir = files_.SyncDir((folder / "data").string());
  EXPECT_FALSE(file_as_dir.ok());
  EXPECT_NE(file_as_dir.message().find("cannot open " + (folder / "data").string() + " to sync it"),
            std::string::npos)
      << file_as_dir.ToString();
}

}  // namespace
}  // namespace ps
