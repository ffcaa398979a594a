// Mesh::create_comms over Gloo: kept apart from mesh_comms.cpp so the grid logic and its tests
// link without the Gloo transport.
#include <chrono>

#include "runtime/dist/mesh.h"

namespace trainer::dist {

void Mesh::create_comms(std::shared_ptr<Store> store, double timeout_s) {
  create_comms(
      [store](const std::string& prefix, int rank, int size, const CommOptions& opts) {
        return make_gloo_comm(make_prefix_store(store, prefix), rank, size, opts);
      },
      timeout_s);
}

}  // namespace trainer::dist
