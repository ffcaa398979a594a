#pragma once
// ReleasableMemory: the device buffers whose ranges ZeRO releases and acquires again (the model's
// fp32 params and grads and their bf16 copy; zero_optimizer.h), so that ZeRO 2 and 3 free device
// memory as the cpu backend frees host pages. Each buffer is a reserved virtual address range
// (cuMemAddressReserve) backed page by page (the allocation granularity, 2 MiB on Hopper) with
// physical memory (cuMemCreate, cuMemMap): its address never changes, so the model's views stay.
//  - release: the pages wholly inside the range are unmapped once the stream is done with them
//    (ReleasedSpans: a page that holds a live byte stays); the rest of the range is returned, for
//    the caller to fill.
//  - acquire: the range's unmapped pages are mapped again; the caller zeroes them (returned).
// Unmapped pages wait in a pool for the next acquire (mapping a kept page costs less than creating
// one), up to the most pages one acquire took (a unit's worth: ZeRO 3 releases one unit as it
// gathers the next); the rest go back to the driver.
// The CUDA driver's entry points come through the runtime (cudaGetDriverEntryPointByVersion): no
// link to libcuda, which a machine without a driver lacks.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/core/released_spans.h"

namespace trainer::cuda {

class ReleasableMemory {
 public:
  // Whether the driver offers virtual memory management on `device` (with the reason when not).
  static bool supported(int device, std::string* why);
  // Work on `stream` may use the buffers: a release waits for it before unmapping.
  ReleasableMemory(int device, cudaStream_t stream);
  ~ReleasableMemory();
  ReleasableMemory(const ReleasableMemory&) = delete;
  ReleasableMemory& operator=(const ReleasableMemory&) = delete;

  // Mapped whole, or (mapped false) released whole: no page held until acquired. Throws CudaError.
  void* alloc(size_t bytes, bool mapped = true);
  bool free(void* p) noexcept;  // false: not one of ours
  bool owns(const void* p) const;

  // [p, p + bytes) inside one allocation. release: unmaps its whole pages; returns the spans left
  // to fill. acquire: maps back its unmapped pages; returns them (to zero).
  std::vector<ByteSpan> release(const void* p, size_t bytes);
  std::vector<ByteSpan> acquire(const void* p, size_t bytes);
  // Bytes of [p, p + bytes) mapped now.
  int64_t resident_bytes(const void* p, size_t bytes) const;

  size_t page_bytes() const { return page_; }
  size_t held_bytes() const { return (pages_.size() + pool_.size()) * page_; }  // mapped, pooled
  size_t peak_held_bytes() const { return peak_held_; }

 private:
  struct Allocation {
    uintptr_t base = 0;
    size_t size = 0;  // reserved (whole pages)
  };
  struct Driver;  // the driver entry points (releasable_memory.cpp)

  Allocation* find(uintptr_t a);
  const Allocation* find(uintptr_t a) const;
  void map_pages(ByteSpan span);    // mapped, read-write for the device
  void unmap_pages(ByteSpan span);  // to the pool, or the driver
  void unmap_page(uintptr_t at, bool keep);
  void note_held();

  int device_;
  cudaStream_t stream_;
  std::unique_ptr<Driver> driver_;
  size_t page_ = 0;
  ReleasedSpans spans_;
  std::map<uintptr_t, Allocation> allocations_;              // by base
  std::unordered_map<uintptr_t, unsigned long long> pages_;  // mapped page address -> handle
  std::vector<unsigned long long> pool_;                     // physical pages, unmapped
  size_t pool_limit_pages_ = 0, peak_held_ = 0;
};

}  // namespace trainer::cuda
