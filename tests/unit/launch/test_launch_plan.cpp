// plan_children / rank_environment: the torchrun-compatible variables, read back through the
// same detect_launch_env that `trainer train` uses.
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "runtime/config/run_config.h"
#include "runtime/dist/launch_env.h"
#include "runtime/launch/launch_plan.h"

using trainer::launch::LaunchOptions;
using trainer::launch::plan_children;

namespace {

std::map<std::string, std::string> as_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

trainer::dist::LaunchEnv detect(const std::vector<std::string>& env) {
  auto m = as_map(env);
  return trainer::dist::detect_launch_env([m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  });
}

LaunchOptions two_nodes(int node_rank) {
  LaunchOptions o;
  o.nproc_per_node = 3;
  o.nnodes = 2;
  o.node_rank = node_rank;
  o.master_addr = "head";
  o.master_port = 4321;
  o.exe = "/path/trainer";
  o.run_yaml = "configs/tiny.yaml";
  o.train_args = {"--set", "train.steps=5", "--out", "x y"};
  return o;
}

}  // namespace

TEST_CASE("children_run_train_with_the_arguments_verbatim", "[launch]") {
  LaunchOptions o = two_nodes(0);
  auto kids = plan_children(o, {"PATH=/bin"}, 6);
  REQUIRE(kids.size() == 3);
  std::vector<std::string> expected{o.exe, "train", o.run_yaml};
  expected.insert(expected.end(), o.train_args.begin(), o.train_args.end());
  for (const auto& k : kids) CHECK(k.argv == expected);
}

TEST_CASE("rank_environment_reads_back_as_the_global_rank", "[launch]") {
  for (int node : {0, 1}) {
    LaunchOptions o = two_nodes(node);
    auto kids = plan_children(o, {"PATH=/bin", "RANK=99", "TORCHELASTIC_RUN_ID=x"}, 6);
    for (int local = 0; local < o.nproc_per_node; ++local) {
      INFO("node " << node << " local rank " << local);
      auto e = detect(kids[local].env);
      CHECK(e.rank == node * o.nproc_per_node + local);
      CHECK(e.world_size == o.nnodes * o.nproc_per_node);
      CHECK(e.local_rank == local);
      CHECK(e.local_world_size == o.nproc_per_node);
      CHECK(e.master_addr == o.master_addr);
      CHECK(e.master_port == o.master_port);
      CHECK(e.source == "trainer-launch");
      CHECK_FALSE(e.torchelastic);  // an inherited agent variable does not leak into ranks
      auto m = as_map(kids[local].env);
      CHECK(m["NODE_RANK"] == std::to_string(node));
      CHECK(m["GROUP_RANK"] == std::to_string(node));
      CHECK(m["PATH"] == "/bin");
      CHECK(m["OMP_NUM_THREADS"] == "2");  // 6 cores / 3 ranks
    }
  }
}

TEST_CASE("omp_num_threads_from_the_user_is_kept", "[launch]") {
  auto kids = plan_children(two_nodes(0), {"OMP_NUM_THREADS=5"}, 64);
  CHECK(as_map(kids[0].env)["OMP_NUM_THREADS"] == "5");
}

TEST_CASE("single_node_without_port_gets_a_free_port", "[launch]") {
  LaunchOptions o;
  o.nproc_per_node = 2;
  o.exe = "/t";
  o.run_yaml = "r.yaml";
  auto kids = plan_children(o, {}, 2);
  auto e0 = detect(kids[0].env), e1 = detect(kids[1].env);
  CHECK(e0.master_port > 0);
  CHECK(e0.master_port == e1.master_port);
  CHECK(e0.master_addr == "127.0.0.1");
  // outside the kernel's ephemeral ports (Debian's: 32768-60999), below 29000
  const auto [low, high] = trainer::launch::ephemeral_ports();
  REQUIRE(low > 0);
  const auto [first, last] = trainer::launch::picked_port_range();
  REQUIRE(first > 0);
  CHECK((last < low || first > high));
  for (int i = 0; i < 20; ++i) {
    const int port = trainer::launch::pick_free_port();
    CHECK(port >= first);
    CHECK(port <= last);
  }
}

TEST_CASE("inconsistent_launch_options_are_config_errors_naming_the_option", "[launch]") {
  using trainer::config::ConfigError;
  LaunchOptions o = two_nodes(2);
  CHECK_THROWS_WITH(plan_children(o, {}, 1), Catch::Contains("--node-rank"));
  o = two_nodes(0);
  o.master_port = 0;
  CHECK_THROWS_WITH(plan_children(o, {}, 1), Catch::Contains("--master-port"));
  o = two_nodes(0);
  o.nproc_per_node = 0;
  CHECK_THROWS_AS(plan_children(o, {}, 1), ConfigError);
  CHECK_THROWS_WITH(plan_children(o, {}, 1), Catch::Contains("--nproc-per-node"));
}
