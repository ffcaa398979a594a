#pragma once
// dlopen of a CUDA library by its versioned file name (the loader's search path, then the
// directory of the libcudart in use), for the libraries the cuda backend loads when it is created
// instead of linking them (cublaslt_library.h, cudnn_library.h).
#include <dlfcn.h>

#include <stdexcept>
#include <string>

// "libX.so." TRAINER_VERSION_STRING(X_MAJOR): a header's version macro as a string literal.
#define TRAINER_STRINGIFY(x) #x
#define TRAINER_VERSION_STRING(x) TRAINER_STRINGIFY(x)

namespace trainer::cuda {

// The library's handle; throws naming the file, `what` it is, and the loader's errors. `hint`
// ends the message (what to do about it).
void* open_cuda_library(const char* file, const char* what, const char* hint);

// fn = the library's `name`; throws naming both when the library lacks it (older than the
// headers this binary was built with).
template <class Fn>
void bind_symbol(void* lib, const char* file, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr)
    throw std::runtime_error(std::string("cuda backend: ") + file + " has no " + name +
                             " (a library older than the headers this binary was built with?)");
}

// Closes the library at scope exit unless every symbol bound (bound = true).
struct CloseUnlessBound {
  void* lib;
  bool bound = false;
  ~CloseUnlessBound() {
    if (!bound) dlclose(lib);
  }
};

}  // namespace trainer::cuda
