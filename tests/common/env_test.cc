// OsFilesystem and OsEnv on real files: what each call does and the code
// of each error.
#include "common/env.h"
#include "tests/util/status_matchers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace ps {
namespace {

namespace fs = std::filesystem;

class OsFilesystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ps_env_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Slurp(const std::string& path) {
    std::string text(fs::file_size(path), '\0');
    std::ifstream(path, std::ios::binary).read(text.data(), static_cast<std::streamsize>(text.size()));
    return text;
  }

  OsFilesystem files_;
  fs::path dir_;
};

TEST_F(OsFilesystemTest, WritesSyncsAndClosesAFile) {
  ASSERT_OK(files_.CreateDirs(Path("a/b")));
  ASSERT_OK(files_.CreateDirs(Path("a/b")));  // an existing folder is fine
  auto file = files_.NewWritableFile(Path("a/b/f"));
  ASSERT_OK(file);
  ASSERT_OK((*file)->Append("hello "));
  ASSERT_OK((*file)->Append(std::string(100000, 'x')));
  ASSERT_OK((*file)->Sync());
  ASSERT_OK((*file)->Close());
  EXPECT_EQ(Slurp(Path("a/b/f")), "hello " + std::string(100000, 'x'));
  ASSERT_OK(files_.SyncFile(Path("a/b/f")));
  ASSERT_OK(files_.SyncDir(Path("a/b")));

  EXPECT_EQ(files_.TypeOf(Path("a/b/f")).value(), Filesystem::Type::kFile);
  EXPECT_EQ(files_.TypeOf(Path("a/b")).value(), Filesystem::Type::kDirectory);
  EXPECT_EQ(files_.TypeOf(Path("gone")).value(), Filesystem::Type::kMissing);
  auto entries = files_.List(Path("a"));
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].name, "b");
  EXPECT_EQ((*entries)[0].type, Filesystem::Type::kDirectory);
}

TEST_F(OsFilesystemTest, RenameOntoAFullFolderIsAlreadyExistsAndExchangeSwaps) {
  ASSERT_OK(files_.CreateDirs(Path("old")));
  ASSERT_OK(files_.CreateDirs(Path("new")));
  std::ofstream(Path("old/data")) << "old";
  std::ofstream(Path("new/data")) << "new";
  const Status renamed = files_.Rename(Path("new"), Path("old"));
  EXPECT_EQ(renamed.code(), StatusCode::kAlreadyExists) << renamed.ToString();
  EXPECT_NE(renamed.message().find("cannot rename " + Path("new") + " to " + Path("old")),
            std::string::npos)
      << renamed.ToString();
  const Status exchanged = files_.Exchange(Path("new"), Path("old"));
  if (exchanged.code() == StatusCode::kUnimplemented) GTEST_SKIP() << exchanged.ToString();
  ASSERT_OK(exchanged);
  EXPECT_EQ(Slurp(Path("old/data")), "new");
  EXPECT_EQ(Slurp(Path("new/data")), "old");
  ASSERT_OK(files_.RemoveTree(Path("new")));
  ASSERT_OK(files_.RemoveTree(Path("new")));  // a missing path is fine
  ASSERT_OK(files_.RemoveFile(Path("old/data")));
  EXPECT_EQ(files_.TypeOf(Path("old/data")).value(), Filesystem::Type::kMissing);
}

TEST_F(OsFilesystemTest, ErrorsNameThePath) {
  const std::string gone = Path("gone/f");
  for (const Status& s : {files_.NewWritableFile(gone).status(), files_.SyncFile(gone),
                          files_.SyncDir(gone), files_.RemoveFile(gone),
                          files_.Rename(gone, Path("x")), files_.List(gone).status()}) {
    EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
    EXPECT_NE(s.message().find(gone), std::string::npos) << s.ToString();
  }
}

TEST(ErrnoStatusTest, SaysWhatFailedWithTheReason) {
  const Status s = ErrnoStatus(ENOSPC, "cannot write /a");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "cannot write /a: No space left on device");
  EXPECT_EQ(ErrnoStatus(EIO, "x").code(), StatusCode::kInternal);
}

TEST(FileSystemErrorTest, MapsErrnoToStatusCodes) {
  const auto code = [](int err) {
    return FileSystemError(std::error_code(err, std::generic_category()), "x", StatusCode::kInternal)
        .code();
  };
  EXPECT_EQ(code(EACCES), StatusCode::kPermissionDenied);
  EXPECT_EQ(code(EPERM), StatusCode::kPermissionDenied);
  EXPECT_EQ(code(EROFS), StatusCode::kPermissionDenied);
  EXPECT_EQ(code(ENOSPC), StatusCode::kResourceExhausted);
  EXPECT_EQ(code(EDQUOT), StatusCode::kResourceExhausted);
  EXPECT_EQ(code(EIO), StatusCode::kInternal);
  const Status s =
      FileSystemError(std::error_code(ENOSPC, std::generic_category()), "cannot write /a", StatusCode::kDataLoss);
  EXPECT_EQ(s.message().rfind("cannot write /a: ", 0), 0u) << s.ToString();
  EXPECT_EQ(FileSystemError(std::error_code(EIO, std::generic_category()), "x", StatusCode::kDataLoss)
                .code(),
            StatusCode::kDataLoss);
}

TEST(OsEnvTest, SleepsOnItsClock) {
  OsEnv env;
  const Clock::TimePoint start = env.clock().Now();
  env.SleepFor(std::chrono::milliseconds(20));
  EXPECT_GE(env.clock().Now() - start, std::chrono::milliseconds(20));
}

}  // namespace
}  // namespace ps
