// Zeroed memory for large arrays that are read at random (a hashed table's
// rows and index): on 2 MiB pages where the kernel gives them.
//
// A lookup in a table of millions of rows reads a few cache lines anywhere
// in hundreds of MiB: on 4 KiB pages each of them also misses the TLB, and
// under a hypervisor (nested paging) a TLB miss costs about as much as the
// cache miss itself. So an array of kHugePageBytes or more is mapped on
// its own (mmap), starting on a 2 MiB boundary, and advised for
// transparent huge pages (madvise MADV_HUGEPAGE: taken when the system's
// transparent_hugepage setting is "always" or "madvise", the usual
// default; under "never" the array simply stays on 4 KiB pages). Its pages
// become resident as they are first written, 2 MiB at a time where huge
// pages are given. A smaller array comes from the heap, aligned to a cache
// line and zeroed.
#ifndef PS_STORE_HUGE_MEMORY_H_
#define PS_STORE_HUGE_MEMORY_H_

#include <cstddef>

namespace ps {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Whether arrays mapped from now on are advised for huge pages
// (MADV_HUGEPAGE) or kept off them (MADV_NOHUGEPAGE, also where the system
// setting is "always"). Process-wide, default true; ps_server sets it from
// server.huge_pages before it makes its store.
void SetHugePages(bool use);
bool HugePagesUsed();

class HugeMemory {
 public:
  HugeMemory() = default;
  // At least `bytes` of zeroed memory, aligned to 64 bytes (to 2 MiB when
  // `bytes` >= kHugePageBytes). Throws std::bad_alloc when it cannot be had.
  static HugeMemory Allocate(size_t bytes);

  HugeMemory(HugeMemory&& other) noexcept { *this = static_cast<HugeMemory&&>(other); }
  HugeMemory& operator=(HugeMemory&& other) noexcept;
  HugeMemory(const HugeMemory&) = delete;
  HugeMemory& operator=(const HugeMemory&) = delete;
  ~HugeMemory() { Release(); }

  void* get() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  void Release() noexcept;
  void* data_ = nullptr;
  size_t bytes_ = 0;     // as asked
  size_t mapped_ = 0;    // bytes mapped (0: from the heap)
};

}  // namespace ps

#endif  // PS_STORE_HUGE_MEMORY_H_
