#pragma once
// Copying tokens out of a memory-mapped shard, surviving a SIGBUS. A file truncated while mapped
// (`cp new.bin shard.bin` over a running job's data) turns a read of its lost pages into SIGBUS,
// as does an I/O error under the mapping (NFS, a bad sector) or a memory error; each killed the
// rank without a word. The copy arms this thread's jump; a handler (installed by the first copy,
// the one before it kept for SIGBUS outside a copy) jumps back, and the caller names the file.
#include <cstdint>

namespace trainer::data {

// out[i] = src[i] for i < n. Returns 0, or the SIGBUS's si_code (BUS_ADRERR: past the end of
// the mapped file; others: an I/O or hardware error) when the copy faulted.
int copy_from_mapping(const uint16_t* src, int64_t n, int32_t* out);

}  // namespace trainer::data
