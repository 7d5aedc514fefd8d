// HugeMemory: zeroed, aligned, writable memory; a large array is mapped on
// a 2 MiB boundary and advised for transparent huge pages.
#include "store/huge_memory.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace ps {
namespace {

bool AllZero(const void* p, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

// The system's transparent huge page setting: "always", "madvise" or "never"
// (the bracketed word of the file), empty when the kernel has none.
std::string TransparentHugePages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

// The THPeligible field of the mapping that holds `p`, per /proc/self/smaps;
// -1 when not found.
int HugePageEligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find(' ') > line.find('-')) {
      inside = begin <= at && at < end;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

TEST(HugeMemoryTest, ASmallArrayIsZeroedAndAlignedToALine) {
  for (const size_t bytes : {size_t{1}, size_t{64}, size_t{1000}, kHugePageBytes - 1}) {
    HugeMemory m = HugeMemory::Allocate(bytes);
    ASSERT_NE(m.get(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m.get()) % 64, 0u) << bytes;
    EXPECT_EQ(m.size(), bytes);
    EXPECT_TRUE(AllZero(m.get(), bytes)) << bytes;
    std::memset(m.get(), 0xab, bytes);  // writable to its end
  }
}

TEST(HugeMemoryTest, ALargeArrayStartsOnA2MiBBoundaryZeroedAndIsAdvisedForHugePages) {
  const size_t bytes = 3 * kHugePageBytes + 12345;
  HugeMemory m = HugeMemory::Allocate(bytes);
  ASSERT_NE(m.get(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.get()) % kHugePageBytes, 0u);
  EXPECT_TRUE(AllZero(m.get(), bytes));
  std::memset(m.get(), 0xcd, bytes);
  const std::string setting = TransparentHugePages();
  if (setting == "always" || setting == "madvise") {
    // Advised: eligible for huge pages under "madvise" too.
    EXPECT_EQ(HugePageEligible(m.get()), 1) << "transparent_hugepage is " << setting;
  }
  // Moved, the memory goes with it; the moved-from one holds none.
  void* p = m.get();
  HugeMemory n = std::move(m);
  EXPECT_EQ(n.get(), p);
  EXPECT_EQ(n.size(), bytes);
  EXPECT_EQ(m.get(), nullptr);  // NOLINT(bugprone-use-after-move): checked on purpose
  n = HugeMemory::Allocate(kHugePageBytes);
  EXPECT_NE(n.get(), nullptr);
}

}  // namespace
}  // namespace ps
