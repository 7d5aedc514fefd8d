// Where the store's blocks live in memory: half a page into a page.
//
// A dense pull's reply and a replica's copy hand a block's memory straight
// to the socket (Frame::Share). ZeroMQ copies a large frame's first
// (8192 - p) bytes into its batch, p being the bytes before them there (the
// header frame and the frame prefixes, a few dozen), and passes the rest to
// send(2) from the frame's own memory; the kernel copies that into socket
// buffer pages where it starts on a page boundary. So the destination is
// (p - the block's offset in its page) bytes past the source, modulo 4 KiB.
// On this project's CPU kind (AMD EPYC with FSRM) the kernel's `rep movsb`
// is several times slower per byte when the destination is a little past
// the source modulo 4 KiB: at malloc's usual offset (16) behind a 23-byte
// prefix, 7 bytes past, the copy of a 1 MiB pull took 10 times the CPU of
// raw ZeroMQ's, and at a page's start (23 bytes past) still 1.5 times. Half
// a page in, the destination is about 2 KiB behind the source for any
// header under 2 KiB, and the copy runs at full speed
// (benchmarks/docs/transport_bench.md, "A busy host").
//
// Arrays under a page get a cache line's alignment instead, so a table of a
// few rows does not pay a page for them.
//
// Arrays of a quarter block (kPooledBlockBytes) or more, the blocks
// themselves, come from a pool of 2 MiB-aligned chunks advised for
// transparent huge pages (store/huge_memory.h), carved in whole pages with
// the same half-page offset. A restore writes a shard's every block at
// once, and on 4 KiB pages the kernel's work to back them (a page fault,
// zeroing and memory-cgroup charge per page, 300,000 of them for 1.2 GB)
// was half of its CPU; on 2 MiB pages it is 512 times fewer faults
// (benchmarks/docs/recovery_bench.md). A freed array's memory goes back
// to the pool for the next array of its size (a copy-on-write copy, a
// moved block), not to the system: a shard's memory stays at its peak, as
// the heap's would.
#ifndef PS_STORE_BLOCK_MEMORY_H_
#define PS_STORE_BLOCK_MEMORY_H_

#include <sys/mman.h>

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace ps {

inline constexpr size_t kPageBytes = 4096;
// Where an array of a page or more starts in its page.
inline constexpr size_t kBlockPageOffset = kPageBytes / 2;

// Arrays from this size on come from the huge-page pool.
inline constexpr size_t kPooledBlockBytes = size_t{256} << 10;

// Memory for an array of `bytes` (nullptr when it cannot be had) and its
// release, placed as above. The memory holds whatever it held: a pooled
// array's may be a freed array's values. Safe to call from any thread.
void* AllocateBlockMemory(size_t bytes) noexcept;
void FreeBlockMemory(void* p, size_t bytes) noexcept;

// Backs the pages of an array from AllocateBlockMemory (`p`, `bytes`) with
// memory at once, writable, in one call instead of a page fault per page
// (MADV_POPULATE_WRITE, Linux 5.14; where the kernel refuses it the pages
// fault in as they are first written). The values are left as they are.
inline void PrefaultBlockMemory(void* p, size_t bytes) noexcept {
#ifdef __linux__
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, for older headers
  if (bytes < kPageBytes) return;
  auto* start = static_cast<std::byte*>(p) - kBlockPageOffset;  // the allocation's first page
  ::madvise(start, bytes + kBlockPageOffset, kPopulateWrite);
#else
  (void)p;
  (void)bytes;
#endif
}

template <class T>
struct BlockAllocator {
  using value_type = T;
  BlockAllocator() = default;
  template <class U>
  BlockAllocator(const BlockAllocator<U>&) noexcept {}  // NOLINT: allocators convert implicitly

  T* allocate(size_t n) {
    void* p = AllocateBlockMemory(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept { FreeBlockMemory(p, n * sizeof(T)); }
  // Elements made without a value (resize(n)) are left unwritten, so a
  // block about to be overwritten (a restore) is not written twice; give
  // the value to have one (resize(n, 0.0f), assign).
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const BlockAllocator<U>&) const noexcept {
    return true;
  }
};

// A block's values or one optimizer state array.
using BlockFloats = std::vector<float, BlockAllocator<float>>;

// An array of `n` T placed as a block's, shared; nullptr when the memory
// cannot be had.
template <class T>
std::shared_ptr<T[]> MakeBlockArray(size_t n) {
  const size_t bytes = n * sizeof(T);
  void* p = AllocateBlockMemory(bytes);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<T[]>(static_cast<T*>(p), [bytes](T* q) { FreeBlockMemory(q, bytes); });
}

}  // namespace ps

#endif  // PS_STORE_BLOCK_MEMORY_H_
