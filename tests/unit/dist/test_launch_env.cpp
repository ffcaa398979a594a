// detect_launch_env on fake environments: each source, the precedence between them, and errors
// that name the offending variable.
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "runtime/dist/launch_env.h"
#include "runtime/dist/rendezvous.h"

using trainer::dist::detect_launch_env;
using trainer::dist::EnvLookup;
using trainer::dist::LaunchEnv;
using trainer::dist::LaunchEnvError;
using Env = std::map<std::string, std::string>;

namespace {

EnvLookup lookup(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

LaunchEnv detect(const Env& env) {
  return detect_launch_env(lookup(env));
}

void require_error_naming(const Env& env, const std::string& var) {
  INFO("env variable expected in the message: " << var);
  CHECK_THROWS_AS(detect(env), LaunchEnvError);
  CHECK_THROWS_WITH(detect(env), Catch::Contains(var));
}

}  // namespace

TEST_CASE("empty_environment_is_a_single_process", "[launch_env]") {
  LaunchEnv e = detect({});
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.local_rank == 0);
  CHECK(e.local_world_size == 1);
  CHECK(e.source == "none");
}

TEST_CASE("torchrun_variables_give_rank_world_and_master", "[launch_env]") {
  Env env = {{"RANK", "5"},
             {"WORLD_SIZE", "8"},
             {"LOCAL_RANK", "1"},
             {"LOCAL_WORLD_SIZE", "4"},
             {"MASTER_ADDR", "host-a"},
             {"MASTER_PORT", "1234"}};
  LaunchEnv e = detect(env);
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "host-a");
  CHECK(e.master_port == 1234);
  CHECK(e.source == "torchrun");
  CHECK_FALSE(e.torchelastic);
  env["TRAINER_LAUNCH"] = "1";
  CHECK(detect(env).source == "trainer-launch");
}

TEST_CASE("torchrun_variables_take_precedence_over_slurm", "[launch_env]") {
  Env env = {{"RANK", "1"},
             {"WORLD_SIZE", "2"},
             {"SLURM_PROCID", "0"},
             {"SLURM_NTASKS", "1"},
             {"SLURM_NODELIST", "n1"}};
  LaunchEnv e = detect(env);
  CHECK(e.source == "torchrun");
  CHECK(e.rank == 1);
  CHECK(e.world_size == 2);
}

TEST_CASE("torchrun_missing_local_variables_default_to_one_node", "[launch_env]") {
  LaunchEnv e = detect({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
  CHECK(e.local_rank == 3);
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "127.0.0.1");
}

TEST_CASE("inconsistent_or_malformed_variables_name_the_variable", "[launch_env]") {
  require_error_naming({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK");
  require_error_naming({{"RANK", "x"}, {"WORLD_SIZE", "4"}}, "RANK");
  require_error_naming({{"RANK", "1"}, {"WORLD_SIZE", "4a"}}, "WORLD_SIZE");
  require_error_naming({{"RANK", "1"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE");
  require_error_naming({{"RANK", "0"}}, "WORLD_SIZE");
  require_error_naming({{"WORLD_SIZE", "2"}}, "RANK");
  require_error_naming({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK");
  CHECK_THROWS_WITH(detect({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}),
                    Catch::Contains("RANK=-1 is out of range [0, WORLD_SIZE=2)"));
  CHECK_THROWS_WITH(detect({{"RANK", "2"}, {"WORLD_SIZE", "2"}}),
                    Catch::Contains("RANK=2 is out of range [0, WORLD_SIZE=2)"));
  require_error_naming(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
      "LOCAL_RANK");
  require_error_naming({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}},
                       "MASTER_PORT");
  require_error_naming({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}, {"SLURM_NODELIST", "n1"}},
                       "SLURM_PROCID");
  require_error_naming({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NODELIST", "n[1"}},
                       "SLURM_NODELIST");
  require_error_naming({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "four"}}, "SLURM_NTASKS");
  // A MASTER_ADDR that cannot work is refused at once, not after the rendezvous timeout.
  for (const char* addr : {"", "127.0.0.1:29500", "::1", "[::1]"}) {
    INFO("MASTER_ADDR '" << addr << "'");
    require_error_naming({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", addr}},
                         "MASTER_ADDR");
    require_error_naming({{"SLURM_PROCID", "0"},
                          {"SLURM_NTASKS", "2"},
                          {"SLURM_NODELIST", "n1"},
                          {"MASTER_ADDR", addr}},
                         "MASTER_ADDR");
  }
  CHECK(detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", ""}}).world_size ==
        1);  // (one process connects to nothing)
}

TEST_CASE("slurm_variables_give_rank_and_first_host_as_master", "[launch_env]") {
  Env env = {{"SLURM_PROCID", "6"},
             {"SLURM_NTASKS", "8"},
             {"SLURM_LOCALID", "2"},
             {"SLURM_NTASKS_PER_NODE", "4"},
             {"SLURM_NODELIST", "gpu[07-08]"},
             {"SLURM_JOB_ID", "123456"}};
  LaunchEnv e = detect(env);
  CHECK(e.source == "slurm");
  CHECK(e.rank == 6);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "gpu07");
  CHECK(e.master_port == 20000 + 123456 % 20000);
}

TEST_CASE("slurm_master_port_and_addr_overrides_win", "[launch_env]") {
  Env env = {{"SLURM_PROCID", "0"},  {"SLURM_NTASKS", "2"},   {"SLURM_NODELIST", "a,b"},
             {"SLURM_JOB_ID", "77"}, {"MASTER_PORT", "4444"}, {"MASTER_ADDR", "b"}};
  LaunchEnv e = detect(env);
  CHECK(e.master_port == 4444);
  CHECK(e.master_addr == "b");
}

TEST_CASE("slurm_job_nodelist_is_used_without_slurm_nodelist", "[launch_env]") {
  Env env = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "rack[3-4]-n1"}};
  CHECK(detect(env).master_addr == "rack3-n1");
}

TEST_CASE("slurm_tasks_per_node_is_derived_when_not_given", "[launch_env]") {
  Env base = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "7"}, {"SLURM_NODELIST", "n[1-3]"}};
  Env env = base;
  env["SLURM_TASKS_PER_NODE"] = "3(x2),1";
  env["SLURM_NODEID"] = "2";
  CHECK(detect(env).local_world_size == 1);
  env["SLURM_NODEID"] = "1";
  CHECK(detect(env).local_world_size == 3);

  env = base;
  env["SLURM_NTASKS"] = "6";
  env["SLURM_NNODES"] = "3";
  CHECK(detect(env).local_world_size == 2);
  env["SLURM_NNODES"] = "4";
  require_error_naming(env, "SLURM_NNODES");
}

TEST_CASE("store_port_moves_past_the_torchelastic_agent_store", "[launch_env]") {
  Env env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}};
  LaunchEnv plain = detect(env);
  CHECK(trainer::dist::rendezvous_port(plain) == plain.master_port);
  env["TORCHELASTIC_RUN_ID"] = "abc";
  LaunchEnv elastic = detect(env);
  CHECK(elastic.torchelastic);
  CHECK(trainer::dist::rendezvous_port(elastic) == elastic.master_port + 1);
  env["MASTER_PORT"] = "65535";  // the agent's port is the last one: ours goes below it
  CHECK(trainer::dist::rendezvous_port(detect(env)) == 65534);
}

TEST_CASE("trainer_store_dir_selects_a_file_store", "[launch_env]") {
  CHECK(detect({}).store_dir.empty());
  CHECK(detect({{"TRAINER_STORE_DIR", "/shared/rdzv"}}).store_dir == "/shared/rdzv");
}
