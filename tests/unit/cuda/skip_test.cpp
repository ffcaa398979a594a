// Without a device the cuda tests must say so: this one fails if cuda_backend_available() and
// make_backend("cuda") disagree, which would turn a skip into a silent pass or a crash.
#include "tests/unit/cuda/cuda_test_util.h"

using namespace trainer;

TEST_CASE("cuda_availability_agrees_with_make_backend", "[cuda]") {
  bool made = false;
  std::string why;
  try {
    made = make_backend("cuda", 0) != nullptr;
  } catch (const std::exception& e) {
    why = e.what();
  }
  INFO("cuda_backend_available() = " << cuda_backend_available()
                                     << ", make_backend: " << (made ? "ok" : why));
  CHECK(made == cuda_backend_available());
  if (!made) WARN("SKIPPED: no CUDA device (" << why << ")");
}
