// server.huge_pages, end to end: a real ps_server with a dense table of
// 16 MiB keeps its blocks in memory advised for huge pages
// (MADV_HUGEPAGE: VmFlags "hg" in /proc/<pid>/smaps) by default, and in
// memory kept off them (MADV_NOHUGEPAGE: "nh") with `huge_pages: false`,
// whatever the system's transparent_hugepage setting.
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/util/free_port.h"
#include "tests/util/server_process.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

using std::chrono::seconds;

// What the mappings of process `pid` of `min_bytes` or more say of huge
// pages: whether any is advised for them ("hg") and any kept off them ("nh").
struct LargeMappings {
  bool advised = false;
  bool kept_off = false;
  int count = 0;
};

LargeMappings LargeMappingsOf(pid_t pid, uint64_t min_bytes) {
  LargeMappings found;
  std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
  bool large = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 &&
        line.find(' ') > line.find('-')) {
      large = end - begin >= min_bytes;
      found.count += large;
      continue;
    }
    if (large && line.rfind("VmFlags:", 0) == 0) {
      std::istringstream flags(line.substr(8));
      for (std::string flag; flags >> flag;) {
        found.advised |= flag == "hg";
        found.kept_off |= flag == "nh";
      }
    }
  }
  return found;
}

class HugePagesTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
      GTEST_SKIP() << "this kernel has no transparent huge pages: nothing to advise";
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("huge_pages_" + std::to_string(getpid()) + (GetParam() ? "_on" : "_off"));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    job_path_ = (dir_ / "job.yaml").string();
    std::ofstream(job_path_)
        << "cluster: { servers: [\"127.0.0.1:" << FreePort() << "\"], workers: 1 }\n"
        << "tables:\n  - { name: w, rows: 4194304, dim: 1, optimizer: { type: add } }\n"
        << "consistency: { mode: asp }\n"
        << "server: { exit_when_workers_leave: false, huge_pages: "
        << (GetParam() ? "true" : "false") << " }\n";
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::filesystem::path dir_;
  std::string job_path_;
};

TEST_P(HugePagesTest, TheStoreBlocksFollowTheJobsSetting) {
  auto server = StartShardServer(job_path_, 0);
  ASSERT_OK(server);
  ASSERT_OK((*server)->WaitForLine("serving", seconds(30)));
  // The table's 16 MiB of blocks lie in one pool chunk of 64 MiB.
  const LargeMappings m = LargeMappingsOf((*server)->pid(), uint64_t{16} << 20);
  ASSERT_GT(m.count, 0) << "no mapping of 16 MiB or more in ps_server";
  if (GetParam()) {
    EXPECT_TRUE(m.advised) << "huge_pages: true, and no large mapping is advised for huge pages";
    EXPECT_FALSE(m.kept_off);
  } else {
    EXPECT_TRUE(m.kept_off) << "huge_pages: false, and no large mapping is kept off huge pages";
    EXPECT_FALSE(m.advised);
  }
}

INSTANTIATE_TEST_SUITE_P(OnAndOff, HugePagesTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "On" : "Off";
                         });

}  // namespace
}  // namespace ps
