#include "runtime/cuda/cublaslt_library.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace trainer::cuda {
namespace {

#ifndef CUBLAS_VER_MAJOR
#error "cublasLt.h did not define CUBLAS_VER_MAJOR: cannot name the library to load"
#endif
#define TRAINER_STRINGIFY(x) #x
#define TRAINER_VERSION_STRING(x) TRAINER_STRINGIFY(x)
// A literal, so that it is ready before any static initialiser asks for it.
constexpr const char* kFile = "libcublasLt.so." TRAINER_VERSION_STRING(CUBLAS_VER_MAJOR);

// The directory libcudart was loaded from ("" when unknown): the toolkit's cuBLASLt sits beside it.
std::string cudart_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cudaRuntimeGetVersion), &info) == 0 ||
      info.dli_fname == nullptr)
    return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

std::string last_dl_error() {
  const char* error = dlerror();
  return error ? error : "not found";
}

void* open_library() {
  if (void* lib = dlopen(kFile, RTLD_NOW | RTLD_LOCAL)) return lib;
  std::string why = last_dl_error();
  const std::string dir = cudart_directory();
  if (!dir.empty()) {
    if (void* lib = dlopen((dir + kFile).c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    why += "; beside libcudart: " + last_dl_error();
  }
  throw std::runtime_error(std::string("cuda backend: cannot load ") + kFile + " (cuBLASLt): " +
                           why + "; add the CUDA toolkit's lib directory to LD_LIBRARY_PATH");
}

template <class Fn>
void bind(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr)
    throw std::runtime_error(std::string("cuda backend: ") + kFile + " has no " + name +
                             " (a cuBLASLt older than the headers this binary was built with?)");
}

CublasLtLibrary load() {
  void* lib = open_library();  // kept open for the life of the process once every symbol binds
  struct CloseUnlessBound {
    void* lib;
    bool bound = false;
    ~CloseUnlessBound() {
      if (!bound) dlclose(lib);
    }
  } guard{lib};
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
