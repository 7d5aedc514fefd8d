#include "store/huge_memory.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace ps {
namespace {
std::atomic<bool> huge_pages{true};
}  // namespace

void SetHugePages(bool use) { huge_pages.store(use, std::memory_order_relaxed); }
bool HugePagesUsed() { return huge_pages.load(std::memory_order_relaxed); }

HugeMemory HugeMemory::Allocate(size_t bytes) {
  HugeMemory memory;
  memory.bytes_ = bytes;
  if (bytes < kHugePageBytes) {
    const size_t rounded = (bytes + 63) & ~size_t{63};
    memory.data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (memory.data_ == nullptr) throw std::bad_alloc();
    std::memset(memory.data_, 0, rounded);
    return memory;
  }
  // Map a huge page more than asked, keep the part from the first 2 MiB
  // boundary on (whole 4 KiB pages) and give the rest back.
  const size_t length = (bytes + 4095) & ~size_t{4095};
  const size_t padded = length + kHugePageBytes;
  void* mapped = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  if (aligned > start) ::munmap(mapped, aligned - start);
  const uintptr_t end = start + padded;
  if (end > aligned + length) ::munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
  memory.data_ = reinterpret_cast<void*>(aligned);
  memory.mapped_ = length;
  // Advice only: refused (no transparent huge pages in this kernel), the
  // memory is the same on 4 KiB pages.
  (void)::madvise(memory.data_, length, HugePagesUsed() ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return memory;
}

HugeMemory& HugeMemory::operator=(HugeMemory&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    mapped_ = other.mapped_;
    other.data_ = nullptr;
    other.bytes_ = 0;
    other.mapped_ = 0;
  }
  return *this;
}

void HugeMemory::Release() noexcept {
  if (data_ == nullptr) return;
  if (mapped_ != 0) {
    ::munmap(data_, mapped_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  bytes_ = 0;
  mapped_ = 0;
}

}  // namespace ps
