// HugeMemory: zeroed, aligned, writable memory; a large array is mapped on
// a 2 MiB boundary and advised for transparent huge pages. The store's
// blocks (store/block_memory.h) come from such memory, half a page into a
// page.
#include "store/huge_memory.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "store/block_memory.h"

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

// With huge pages turned off (server.huge_pages: false), a large array is
// kept off them whatever the system's setting; turned on again, the next
// one is advised again.
TEST(HugeMemoryTest, TurnedOffALargeArrayIsKeptOffHugePages) {
  const std::string setting = TransparentHugePages();
  if (setting != "always" && setting != "madvise") {
    GTEST_SKIP() << "transparent_hugepage is '" << setting << "': no array is ever eligible";
  }
  SetHugePages(false);
  HugeMemory off = HugeMemory::Allocate(4 * kHugePageBytes);
  SetHugePages(true);
  HugeMemory on = HugeMemory::Allocate(4 * kHugePageBytes);
  EXPECT_EQ(HugePageEligible(off.get()), 0);
  EXPECT_EQ(HugePageEligible(on.get()), 1);
  EXPECT_TRUE(HugePagesUsed());
}

// A block's array (a quarter block or more) lies half a page into a page on
// memory advised for huge pages; a smaller one half a page in as well, from
// the heap.
TEST(BlockMemoryTest, ABlockStartsHalfAPageIntoAPageOnMemoryAdvisedForHugePages) {
  const std::string setting = TransparentHugePages();
  for (const size_t bytes : {size_t{1} << 20, kPooledBlockBytes, size_t{3} << 20, size_t{100} << 10}) {
    void* p = AllocateBlockMemory(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kPageBytes, kBlockPageOffset) << bytes;
    std::memset(p, 0x5a, bytes);  // writable to its end
    if (bytes >= kPooledBlockBytes && (setting == "always" || setting == "madvise")) {
      EXPECT_EQ(HugePageEligible(p), 1) << bytes << " bytes; transparent_hugepage is " << setting;
    }
    FreeBlockMemory(p, bytes);
  }
}

// A freed block's memory is taken again by the next array of its size, not
// by one of another size.
TEST(BlockMemoryTest, AFreedBlockIsTakenAgainByAnArrayOfItsSize) {
  const size_t bytes = (size_t{1} << 20) - 12;  // a dim-3 table's block
  void* first = AllocateBlockMemory(bytes);
  ASSERT_NE(first, nullptr);
  FreeBlockMemory(first, bytes);
  void* other = AllocateBlockMemory(bytes + kPageBytes);
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other, first);
  void* again = AllocateBlockMemory(bytes);
  EXPECT_EQ(again, first);
  FreeBlockMemory(again, bytes);
  FreeBlockMemory(other, bytes + kPageBytes);
}

// Threads taking and freeing blocks of several sizes at once (restoring
// threads, the I/O thread freeing a reply's block) never get overlapping
// memory: each fills its arrays with its own byte and finds them unchanged.
TEST(BlockMemoryTest, ThreadsTakingAndFreeingBlocksAtOnceNeverShareMemory) {
  constexpr int kThreads = 4, kRounds = 60;
  std::vector<std::thread> threads;
  std::vector<int> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &bad] {
      std::vector<std::pair<unsigned char*, size_t>> held;
      for (int r = 0; r < kRounds; ++r) {
        const size_t bytes = kPooledBlockBytes + static_cast<size_t>(r % 3) * (size_t{300} << 10);
        auto* p = static_cast<unsigned char*>(AllocateBlockMemory(bytes));
        if (p == nullptr) {
          ++bad[t];
          continue;
        }
        std::memset(p, t + 1, bytes);
        held.emplace_back(p, bytes);
        if (r % 2 == 1) {  // free the oldest of the ones held
          auto [q, n] = held.front();
          for (size_t i = 0; i < n; i += 511) bad[t] += q[i] != t + 1;
          bad[t] += q[n - 1] != t + 1;
          FreeBlockMemory(q, n);
          held.erase(held.begin());
        }
      }
      for (auto [q, n] : held) {
        for (size_t i = 0; i < n; i += 511) bad[t] += q[i] != t + 1;
        FreeBlockMemory(q, n);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace ps
