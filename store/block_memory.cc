#include "store/block_memory.h"

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "store/huge_memory.h"

namespace ps {
namespace {

// The pool's chunks are mapped this large (or as large as one array that
// needs more): 32 huge pages, so that the one left over at a chunk's end
// wastes at most an array's size in 64 MiB.
constexpr size_t kChunkBytes = size_t{64} << 20;

// Pages of pool memory that hold an array of `bytes` at kBlockPageOffset.
size_t SlotBytes(size_t bytes) {
  return (bytes + kBlockPageOffset + kPageBytes - 1) & ~(kPageBytes - 1);
}

// Slots of whole pages carved in turn from huge-page chunks, and per slot
// size a list of the freed ones, linked through their first bytes (the
// half page before the array, which nothing else writes). Chunks are
// never unmapped.
class BlockPool {
 public:
  static BlockPool& Get() {
    // Never destroyed: blocks may be freed by other objects' destructors
    // at exit.
    static BlockPool* const pool = new BlockPool;
    return *pool;
  }

  std::byte* Allocate(size_t slot) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    std::byte** head = nullptr;
    try {
      head = &free_[slot];  // made here, so that Free never allocates
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
    if (*head != nullptr) {
      std::byte* taken = *head;
      *head = *reinterpret_cast<std::byte**>(taken);
      return taken;
    }
    if (left_ < slot) {
      try {
        chunks_.reserve(chunks_.size() + 1);
        chunks_.push_back(HugeMemory::Allocate(slot > kChunkBytes ? slot : kChunkBytes));
      } catch (const std::bad_alloc&) {
        return nullptr;
      }
      next_ = static_cast<std::byte*>(chunks_.back().get());
      left_ = chunks_.back().size();
    }
    std::byte* taken = next_;
    next_ += slot;
    left_ -= slot;
    return taken;
  }

  void Free(std::byte* taken, size_t slot) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    std::byte*& head = free_.find(slot)->second;
    *reinterpret_cast<std::byte**>(taken) = head;
    head = taken;
  }

 private:
  std::mutex mu_;
  std::vector<HugeMemory> chunks_;
  std::byte* next_ = nullptr;  // the current chunk's first free byte
  size_t left_ = 0;            // and the bytes after it
  std::unordered_map<size_t, std::byte*> free_;  // slot size -> freed slots
};

}  // namespace

void* AllocateBlockMemory(size_t bytes) noexcept {
  if (bytes < kPageBytes) return ::operator new(bytes, std::align_val_t{64}, std::nothrow);
  if (bytes < kPooledBlockBytes) {
    void* page = ::operator new(bytes + kBlockPageOffset, std::align_val_t{kPageBytes}, std::nothrow);
    return page == nullptr ? nullptr : static_cast<std::byte*>(page) + kBlockPageOffset;
  }
  std::byte* slot = BlockPool::Get().Allocate(SlotBytes(bytes));
  return slot == nullptr ? nullptr : slot + kBlockPageOffset;
}

void FreeBlockMemory(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kPageBytes) return ::operator delete(p, std::align_val_t{64});
  std::byte* page = static_cast<std::byte*>(p) - kBlockPageOffset;
  if (bytes < kPooledBlockBytes) return ::operator delete(page, std::align_val_t{kPageBytes});
  BlockPool::Get().Free(page, SlotBytes(bytes));
}

}  // namespace ps
