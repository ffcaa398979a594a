#include "runtime/cuda/cublaslt_library.h"

#include "runtime/cuda/dynamic_library.h"

namespace trainer::cuda {
namespace {

#ifndef CUBLAS_VER_MAJOR
#error "cublasLt.h did not define CUBLAS_VER_MAJOR: cannot name the library to load"
#endif
// A literal, so that it is ready before any static initialiser asks for it.
constexpr const char* kFile = "libcublasLt.so." TRAINER_VERSION_STRING(CUBLAS_VER_MAJOR);

void* open_library() {
  return open_cuda_library(kFile, "cuBLASLt",
                           "add the CUDA toolkit's lib directory to LD_LIBRARY_PATH");
}

template <class Fn>
void bind(void* lib, const char* name, Fn& fn) {
  bind_symbol(lib, kFile, name, fn);
}

CublasLtLibrary load() {
  void* lib = open_library();  // kept open for the life of the process once every symbol binds
  CloseUnlessBound guard{lib};
  CublasLtLibrary l{};
  bind(lib, "cublasLtCreate", l.create);
  bind(lib, "cublasLtDestroy", l.destroy);
  bind(lib, "cublasLtGetStatusString", l.status_string);
  bind(lib, "cublasLtMatmul", l.matmul);
  bind(lib, "cublasLtMatmulAlgoGetHeuristic", l.algo_get_heuristic);
  bind(lib, "cublasLtMatmulDescCreate", l.desc_create);
  bind(lib, "cublasLtMatmulDescDestroy", l.desc_destroy);
  bind(lib, "cublasLtMatmulDescSetAttribute", l.desc_set_attribute);
  bind(lib, "cublasLtMatrixLayoutCreate", l.layout_create);
  bind(lib, "cublasLtMatrixLayoutDestroy", l.layout_destroy);
  bind(lib, "cublasLtMatrixLayoutSetAttribute", l.layout_set_attribute);
  bind(lib, "cublasLtMatmulPreferenceCreate", l.preference_create);
  bind(lib, "cublasLtMatmulPreferenceDestroy", l.preference_destroy);
  bind(lib, "cublasLtMatmulPreferenceSetAttribute", l.preference_set_attribute);
  guard.bound = true;
  return l;
}

}  // namespace

const char* cublaslt_file_name() {
  return kFile;
}

const CublasLtLibrary& cublaslt() {
  static const CublasLtLibrary library = load();  // a failed load throws, and the next call retries
  return library;
}

}  // namespace trainer::cuda
