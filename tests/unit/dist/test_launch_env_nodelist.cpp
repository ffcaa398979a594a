// Slurm host list expansion: every syntax form Slurm prints, checked against the explicit list.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/dist/slurm_nodelist.h"

using trainer::dist::expand_slurm_nodelist;
using trainer::dist::expand_slurm_tasks_per_node;
using trainer::dist::first_slurm_host;
using trainer::dist::SlurmSyntaxError;
using Hosts = std::vector<std::string>;

TEST_CASE("nodelist_expands_each_syntax_form_to_the_listed_hosts", "[slurm]") {
  struct Case {
    std::string list;
    Hosts hosts;
  };
  const std::vector<Case> cases = {
      {"node1", {"node1"}},
      {"a,b,c", {"a", "b", "c"}},
      {"node[1-3]", {"node1", "node2", "node3"}},
      {"node[01-04,07]", {"node01", "node02", "node03", "node04", "node07"}},
      {"a1,b[2-3]", {"a1", "b2", "b3"}},
      {"gpu-[001-003]-ib", {"gpu-001-ib", "gpu-002-ib", "gpu-003-ib"}},
      {"rack[1-2]-n[1-2]", {"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
      {"n[8-11]", {"n8", "n9", "n10", "n11"}},
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},
      {"x[5]", {"x5"}},
      {"[1-2]x", {"1x", "2x"}},
      {"c[1,3],d[0-1],e", {"c1", "c3", "d0", "d1", "e"}},
  };
  for (const auto& c : cases) {
    INFO("list: " << c.list);
    CHECK(expand_slurm_nodelist(c.list) == c.hosts);
    CHECK(first_slurm_host(c.list) == c.hosts.front());
  }
}

TEST_CASE("nodelist_expansion_size_is_the_product_of_its_groups", "[slurm]") {
  auto hosts = expand_slurm_nodelist("r[0-3]-s[00-09]-g[1,2,5]");
  CHECK(hosts.size() == 4u * 10u * 3u);
  CHECK(hosts.front() == "r0-s00-g1");
  CHECK(hosts.back() == "r3-s09-g5");
}

TEST_CASE("nodelist_rejects_malformed_lists_naming_them", "[slurm]") {
  for (std::string bad : {"", "node[1-3", "node1-3]", "node[]", "node[3-1]", "node[a-b]", "a,,b",
                          "node[1--2]", "h[1-2]-[a]-z", "node[99999999999999999999]"}) {
    INFO("list: '" << bad << "'");
    CHECK_THROWS_AS(expand_slurm_nodelist(bad), SlurmSyntaxError);
    if (!bad.empty()) {
      CHECK_THROWS_WITH(expand_slurm_nodelist(bad), Catch::Contains(bad));
    }
  }
}

TEST_CASE("tasks_per_node_expands_repeat_counts", "[slurm]") {
  CHECK(expand_slurm_tasks_per_node("4") == std::vector<int>{4});
  CHECK(expand_slurm_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_slurm_tasks_per_node("8(x2)") == std::vector<int>{8, 8});
  CHECK_THROWS_AS(expand_slurm_tasks_per_node("2(x3"), SlurmSyntaxError);
  CHECK_THROWS_AS(expand_slurm_tasks_per_node("two"), SlurmSyntaxError);
  CHECK_THROWS_AS(expand_slurm_tasks_per_node("99999999999"), SlurmSyntaxError);
  CHECK_THROWS_AS(expand_slurm_tasks_per_node("1(x99999999999)"), SlurmSyntaxError);
}
