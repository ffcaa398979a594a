#pragma once
// DeviceArena: device memory taken from cudaMalloc in big chunks and handed out in 256-byte
// aligned blocks. A freed block goes to a free list and is reused for a request it fits (the
// model allocates a few large buffers once, so this stays simple). No managed memory.
#include <cstddef>
#include <map>
#include <vector>

namespace trainer::cuda {

class DeviceArena {
 public:
  explicit DeviceArena(size_t chunk_bytes = size_t{256} << 20) : chunk_bytes_(chunk_bytes) {}
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  void* alloc(size_t bytes);
  void free(void* p);  // p must come from alloc (nullptr is ignored)
  size_t reserved_bytes() const { return reserved_; }

 private:
  struct Chunk {
    char* base;
    size_t size, used;
  };
  size_t chunk_bytes_, reserved_ = 0;
  std::vector<Chunk> chunks_;
  std::map<void*, size_t> live_blocks_;       // pointer -> block size
  std::multimap<size_t, void*> free_blocks_;  // block size -> pointer
};

}  // namespace trainer::cuda
