// Mesh::create_comms: the communicating half of Mesh (the grid logic is in mesh.cpp).
#include <string>

#include "runtime/core/check.h"
#include "runtime/dist/mesh.h"

namespace trainer::dist {

void Mesh::create_comms(const CommFactory& factory, double timeout_s) {
  for (size_t i = 0; i < kAllAxes.size(); ++i) {
    const Axis a = kAllAxes[i];
    CommOptions opts;
    opts.name = axis_name(a);
    opts.global_ranks = group(a);
    opts.timeout_s = timeout_s;
    const std::string prefix = opts.name + "/" + std::to_string(group_id(a, rank_));
    comms_[i] = factory(prefix, index(a), size(a), opts);
    TRAINER_CHECK(comms_[i], "comm factory returned null for " << prefix);
  }
}

Comm& Mesh::comm(Axis a) const {
  const auto& c = comms_.at(static_cast<size_t>(a));
  TRAINER_CHECK(c, "Mesh::comm(" << axis_name(a) << ") before create_comms");
  return *c;
}

}  // namespace trainer::dist
