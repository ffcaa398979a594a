// Mesh::create_comms over real GlooComms (ranks as threads): each axis communicator reduces
// exactly over the group the grid logic names.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "comm_harness.h"
#include "runtime/dist/mesh.h"

using namespace trainer::dist;

namespace {

// For each axis, the sum of (global rank + 1) over this rank's group, as the comm computes it.
std::vector<std::vector<double>> comm_sums(const MeshShape& s, std::vector<std::string>& errors) {
  std::vector<std::vector<double>> sums(s.world());
  errors = testing::run_ranks(s.world(), [&](testing::RankContext& ctx) {
    Mesh m(ctx.rank, ctx.size, s);
    m.create_comms(ctx.group, 20.0);
    for (Axis a : kAllAxes)
      sums[ctx.rank].push_back(m.comm(a).all_reduce_scalar(ctx.rank + 1, ReduceOp::sum));
  });
  return sums;
}

}  // namespace

TEST_CASE("gloo_axis_comms_reduce_over_exactly_their_group", "[mesh][gloo]") {
  for (MeshShape s : {MeshShape{2, 1, 2, 1, 2}, MeshShape{1, 2, 1, 2, 1}}) {
    std::vector<std::string> errors;
    auto sums = comm_sums(s, errors);
    for (int r = 0; r < s.world(); ++r) {
      INFO("rank " << r << ": " << errors[r]);
      REQUIRE(errors[r].empty());
      Mesh m(r, s.world(), s);
      for (size_t i = 0; i < kAllAxes.size(); ++i) {
        double expected = 0;
        for (int g : m.group(kAllAxes[i])) expected += g + 1;
        INFO("axis " << axis_name(kAllAxes[i]) << " expected " << expected << " got "
                     << sums[r][i]);
        CHECK(sums[r][i] == expected);
      }
    }
  }
}
