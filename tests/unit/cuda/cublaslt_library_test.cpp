// cuBLASLt is loaded when the cuda backend is created, not linked
// (runtime/cuda/cublaslt_library.h): no device is needed to load it and bind its entry points, so
// this test runs on every machine that builds the cuda backend.
#ifdef TRAINER_HAVE_CUDA
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <string>

#include "runtime/core/backend.h"
#include "runtime/cuda/cublaslt_library.h"

using namespace trainer;

TEST_CASE("cublaslt_is_loaded_at_first_use_with_every_entry_point", "[cuda]") {
  // Nothing in a process without a device loads it; had the build linked it, it would be here.
  const bool loaded_before = dlopen(cuda::cublaslt_file_name(), RTLD_NOW | RTLD_NOLOAD) != nullptr;
  INFO(cuda::cublaslt_file_name() << " loaded before the first call: " << loaded_before);
  if (!cuda_backend_available()) CHECK_FALSE(loaded_before);

  const cuda::CublasLtLibrary& lt = cuda::cublaslt();
  // A call into the library: its own words for two statuses (their wording varies by version).
  const std::string ok = lt.status_string(CUBLAS_STATUS_SUCCESS);
  CHECK_FALSE(ok.empty());
  CHECK(ok != lt.status_string(CUBLAS_STATUS_NOT_SUPPORTED));
  const void* entry_points[] = {reinterpret_cast<const void*>(lt.create),
                                reinterpret_cast<const void*>(lt.destroy),
                                reinterpret_cast<const void*>(lt.matmul),
                                reinterpret_cast<const void*>(lt.algo_get_heuristic),
                                reinterpret_cast<const void*>(lt.desc_create),
                                reinterpret_cast<const void*>(lt.desc_destroy),
                                reinterpret_cast<const void*>(lt.desc_set_attribute),
                                reinterpret_cast<const void*>(lt.layout_create),
                                reinterpret_cast<const void*>(lt.layout_destroy),
                                reinterpret_cast<const void*>(lt.layout_set_attribute),
                                reinterpret_cast<const void*>(lt.preference_create),
                                reinterpret_cast<const void*>(lt.preference_destroy),
                                reinterpret_cast<const void*>(lt.preference_set_attribute)};
  for (const void* p : entry_points) CHECK(p != nullptr);
  CHECK(dlopen(cuda::cublaslt_file_name(), RTLD_NOW | RTLD_NOLOAD) != nullptr);
  CHECK(&cuda::cublaslt() == &lt);  // loaded once
}
#endif  // TRAINER_HAVE_CUDA
