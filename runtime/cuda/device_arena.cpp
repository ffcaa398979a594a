// DeviceArena: chunked cudaMalloc, bump allocation, best-fit reuse of freed blocks.
#include "runtime/cuda/device_arena.h"

#include <algorithm>
#include <sstream>

#include "runtime/core/check.h"
#include "runtime/cuda/cuda_check.h"

namespace trainer::cuda {

namespace {
constexpr size_t kAlign = 256;
size_t round_up(size_t n) {
  return std::max(kAlign, (n + kAlign - 1) / kAlign * kAlign);
}
}  // namespace

DeviceArena::~DeviceArena() {
  for (const Chunk& c : chunks_) cudaFree(c.base);  // no throw from a destructor
}

void* DeviceArena::alloc(size_t bytes) {
  const size_t size = round_up(bytes);
  if (auto it = free_blocks_.lower_bound(size); it != free_blocks_.end()) {
    void* p = it->second;
    live_blocks_[p] = it->first;
    free_blocks_.erase(it);
    return p;
  }
  if (chunks_.empty() || chunks_.back().size - chunks_.back().used < size) {
    const size_t chunk = std::max(chunk_bytes_, size);
    void* base = nullptr;
    const cudaError_t e = cudaMalloc(&base, chunk);
    if (e != cudaSuccess) {
      std::ostringstream os;
      os << "cudaMalloc of a " << (chunk >> 20) << " MiB chunk (for a " << bytes << "-byte tensor; "
         << (reserved_ >> 20) << " MiB already reserved): " << cudaGetErrorString(e);
      throw CudaError(os.str());
    }
    chunks_.push_back({static_cast<char*>(base), chunk, 0});
    reserved_ += chunk;
  }
  Chunk& c = chunks_.back();
  void* p = c.base + c.used;
  c.used += size;
  live_blocks_[p] = size;
  return p;
}

void DeviceArena::free(void* p) {
  if (!p) return;
  auto it = live_blocks_.find(p);
  TRAINER_CHECK(it != live_blocks_.end(), "DeviceArena::free: " << p << " was not allocated here");
  free_blocks_.emplace(it->second, p);
  live_blocks_.erase(it);
}

}  // namespace trainer::cuda
