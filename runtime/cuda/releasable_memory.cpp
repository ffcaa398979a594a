#include "runtime/cuda/releasable_memory.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <string>

#include "runtime/core/check.h"
#include "runtime/cuda/cuda_check.h"

namespace trainer::cuda {

struct ReleasableMemory::Driver {
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;

  // Every entry point, or "" with the first that is missing in *missing.
  static Driver load(std::string* missing) {
    Driver d;
    const auto get = [&](const char* symbol, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult status{};
      const cudaError_t e =
          cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &status);
      if (e != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
        cudaGetLastError();
        if (missing->empty()) *missing = std::string("the driver has no ") + symbol;
        return;
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    get("cuGetErrorString", d.get_error_string);
    get("cuDeviceGetAttribute", d.device_get_attribute);
    get("cuMemGetAllocationGranularity", d.granularity);
    get("cuMemAddressReserve", d.address_reserve);
    get("cuMemAddressFree", d.address_free);
    get("cuMemCreate", d.create);
    get("cuMemRelease", d.release);
    get("cuMemMap", d.map);
    get("cuMemUnmap", d.unmap);
    get("cuMemSetAccess", d.set_access);
    return d;
  }

  void check(CUresult r, const char* what, int line) const {
    if (r == CUDA_SUCCESS) return;
    const char* text = nullptr;
    if (get_error_string == nullptr || get_error_string(r, &text) != CUDA_SUCCESS || !text)
      text = "unknown driver error";
    throw_cuda_error(what, text, __FILE__, line);
  }
};

#define CU_CHECK(call) driver_->check((call), #call, __LINE__)

namespace {

CUmemAllocationProp device_pages(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

size_t round_up(size_t n, size_t unit) {
  return (n + unit - 1) / unit * unit;
}

}  // namespace

bool ReleasableMemory::supported(int device, std::string* why) {
  std::string missing;
  const Driver d = Driver::load(&missing);
  if (!missing.empty()) {
    *why = missing;
    return false;
  }
  int vmm = 0;
  if (d.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                             device) != CUDA_SUCCESS ||
      vmm == 0) {
    *why = "device " + std::to_string(device) + " has no virtual memory management";
    return false;
  }
  return true;
}

ReleasableMemory::ReleasableMemory(int device, cudaStream_t stream)
    : device_(device),
      stream_(stream),
      driver_(std::make_unique<Driver>([] {
        std::string missing;
        Driver d = Driver::load(&missing);
        TRAINER_CHECK(missing.empty(), "ReleasableMemory: " << missing);
        return d;
      }())),
      page_([&] {
        const CUmemAllocationProp prop = device_pages(device);
        size_t g = 0;
        driver_->check(driver_->granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                       "cuMemGetAllocationGranularity", __LINE__);
        return std::max<size_t>(g, size_t{2} << 20);
      }()),
      spans_(page_) {}

ReleasableMemory::~ReleasableMemory() {
  // no throw from here: errors are ignored (the process is ending, or the context is gone)
  if (stream_) cudaStreamSynchronize(stream_);
  for (const auto& [at, h] : pages_) {
    driver_->unmap(static_cast<CUdeviceptr>(at), page_);
    driver_->release(h);
  }
  for (const auto& [base, a] : allocations_)
    driver_->address_free(static_cast<CUdeviceptr>(a.base), a.size);
  for (unsigned long long h : pool_) driver_->release(h);
}

ReleasableMemory::Allocation* ReleasableMemory::find(uintptr_t a) {
  auto it = allocations_.upper_bound(a);
  if (it == allocations_.begin()) return nullptr;
  --it;
  return a < it->second.base + it->second.size ? &it->second : nullptr;
}

const ReleasableMemory::Allocation* ReleasableMemory::find(uintptr_t a) const {
  return const_cast<ReleasableMemory*>(this)->find(a);
}

bool ReleasableMemory::owns(const void* p) const {
  return p != nullptr && find(reinterpret_cast<uintptr_t>(p)) != nullptr;
}

void ReleasableMemory::note_held() {
  peak_held_ = std::max(peak_held_, held_bytes());
}

void ReleasableMemory::map_pages(ByteSpan span) {
  const CUmemAllocationProp prop = device_pages(device_);
  for (uintptr_t at = span.begin; at < span.end; at += page_) {
    CUmemGenericAllocationHandle h = 0;
    if (!pool_.empty()) {
      h = pool_.back();
      pool_.pop_back();
    } else {
      CU_CHECK(driver_->create(&h, page_, &prop, 0));
    }
    const CUresult r = driver_->map(static_cast<CUdeviceptr>(at), page_, 0, h, 0);
    if (r != CUDA_SUCCESS) driver_->release(h);
    CU_CHECK(r);
    pages_[at] = h;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_CHECK(driver_->set_access(static_cast<CUdeviceptr>(span.begin), span.size(), &access, 1));
  note_held();
}

void ReleasableMemory::unmap_page(uintptr_t at, bool keep) {
  auto it = pages_.find(at);
  TRAINER_CHECK(it != pages_.end(), "ReleasableMemory: page " << at << " is not mapped");
  const CUmemGenericAllocationHandle h = it->second;
  pages_.erase(it);
  CU_CHECK(driver_->unmap(static_cast<CUdeviceptr>(at), page_));
  if (keep) {
    pool_.push_back(h);
  } else {
    CU_CHECK(driver_->release(h));  // its physical memory goes back to the driver
  }
}

void ReleasableMemory::unmap_pages(ByteSpan span) {
  for (uintptr_t at = span.begin; at < span.end; at += page_)
    unmap_page(at, pool_.size() < pool_limit_pages_);
}

void* ReleasableMemory::alloc(size_t bytes, bool mapped) {
  const size_t size = round_up(std::max<size_t>(bytes, 1), page_);
  CUdeviceptr base = 0;
  CU_CHECK(driver_->address_reserve(&base, size, page_, 0, 0));
  const auto at = static_cast<uintptr_t>(base);
  allocations_[at] = {at, size};
  if (!mapped) {
    spans_.release(at, at + size);  // every page counts as dropped: an acquire maps it
    return reinterpret_cast<void*>(base);
  }
  try {
    map_pages({static_cast<uintptr_t>(base), static_cast<uintptr_t>(base) + size});
  } catch (...) {
    free(reinterpret_cast<void*>(base));
    throw;
  }
  return reinterpret_cast<void*>(base);
}

bool ReleasableMemory::free(void* p) noexcept {
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(p));
  if (it == allocations_.end()) return false;
  // No throw: this runs from the model's destructor, also while a failed step unwinds (after a
  // sticky CUDA error every call fails; the error that ends the run is already on its way).
  const Allocation a = it->second;
  cudaStreamSynchronize(stream_);           // (the arena's frees are in stream order too)
  spans_.acquire(a.base, a.base + a.size);  // (forgets its released pages)
  for (uintptr_t at = a.base; at < a.base + a.size; at += page_) {
    auto page = pages_.find(at);
    if (page == pages_.end()) continue;
    driver_->unmap(static_cast<CUdeviceptr>(at), page_);
    driver_->release(page->second);
    pages_.erase(page);
  }
  driver_->address_free(static_cast<CUdeviceptr>(a.base), a.size);
  allocations_.erase(it);
  return true;
}

std::vector<ByteSpan> ReleasableMemory::release(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  TRAINER_CHECK(
      find(a) != nullptr && find(a) == find(a + bytes - (bytes > 0 ? 1 : 0)),
      "ReleasableMemory::release: [" << p << ", +" << bytes << ") is not inside one allocation");
  ReleasedSpans::Release r = spans_.release(a, a + bytes);
  if (!r.drop.empty()) {
    // Unmapping a page the device still reads or writes is undefined: the work queued on the
    // stream before this release (the unit's last kernels, the copy a reduce-scatter starts
    // from) ends first. Once a unit: the host does not run ahead into the next unit meanwhile.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (const ByteSpan& s : r.drop) unmap_pages(s);
  }
  return r.fill;
}

std::vector<ByteSpan> ReleasableMemory::acquire(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  TRAINER_CHECK(find(a) != nullptr, "ReleasableMemory::acquire: " << p << " is not ours");
  std::vector<ByteSpan> back = spans_.acquire(a, a + bytes);
  size_t pages = 0;
  for (const ByteSpan& s : back) pages += s.size() / page_;
  // The pool keeps as many pages as the largest acquire took (a unit's worth), not as the
  // largest release gave back: the first step's release of the whole gradient buffer would have
  // kept all of it.
  pool_limit_pages_ = std::max(pool_limit_pages_, pages);
  for (const ByteSpan& s : back) map_pages(s);
  return back;
}

int64_t ReleasableMemory::resident_bytes(const void* p, size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return static_cast<int64_t>(bytes - spans_.dropped_within(a, a + bytes));
}

}  // namespace trainer::cuda
