#include "runtime/cpu/host_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "runtime/core/check.h"

namespace trainer::cpu {
uintptr_t page_size() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

void drop_pages(ByteSpan s) {
  void* p = reinterpret_cast<void*>(s.begin);
  TRAINER_CHECK(madvise(p, s.size(), MADV_DONTNEED) == 0 && mprotect(p, s.size(), PROT_NONE) == 0,
                "drop_pages: " << std::strerror(errno));
}

void restore_pages(ByteSpan s) {
  TRAINER_CHECK(mprotect(reinterpret_cast<void*>(s.begin), s.size(), PROT_READ | PROT_WRITE) == 0,
                "restore_pages: " << std::strerror(errno));
}

std::pair<uintptr_t, uintptr_t> discard_whole_pages(uintptr_t a, uintptr_t b) {
  const uintptr_t ps = page_size();
  const uintptr_t pa = (a + ps - 1) / ps * ps, pb = b / ps * ps;
  if (pb > pa && madvise(reinterpret_cast<void*>(pa), pb - pa, MADV_DONTNEED) != 0)
    std::fill(reinterpret_cast<char*>(pa), reinterpret_cast<char*>(pb), 0);
  return {pa, pb};
}

int64_t resident_page_bytes(const void* p, size_t bytes) {
  if (bytes == 0) return 0;
  const uintptr_t ps = page_size();
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) / ps * ps;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + bytes + ps - 1) / ps * ps;
  std::vector<unsigned char> vec((b - a) / ps);
  if (mincore(reinterpret_cast<void*>(a), b - a, vec.data()) != 0)
    return static_cast<int64_t>(bytes);  // cannot tell: count it all
  int64_t pages = 0;
  for (unsigned char v : vec) pages += v & 1;
  return std::min(static_cast<int64_t>(bytes), pages * static_cast<int64_t>(ps));
}

}  // namespace trainer::cpu
