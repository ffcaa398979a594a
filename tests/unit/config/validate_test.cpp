// validate(): divisibility of the model and batch by the grid, dp auto, cross-key rules, data.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "runtime/config/run_config.h"

using namespace trainer::config;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

RunConfig with(const std::vector<std::string>& overrides) {
  return parse_config("", overrides);
}

void require_valid(std::vector<std::string> overrides, int world) {
  RunConfig c = with(overrides);
  INFO("world " << world << "\n" << to_yaml(c));
  REQUIRE_NOTHROW(validate(c, world));
}

}  // namespace

TEST_CASE("dp_auto_is_world_over_pp_cp_tp", "[config][validate]") {
  struct Case {
    int world, tp, pp, cp;
  };
  for (const Case& s : {Case{1, 1, 1, 1}, Case{8, 2, 2, 1}, Case{8, 1, 1, 2}, Case{12, 2, 1, 1},
                        Case{4, 4, 1, 1}}) {
    RunConfig c =
        with({"parallel.tp=" + std::to_string(s.tp), "parallel.pp=" + std::to_string(s.pp),
              "parallel.cp=" + std::to_string(s.cp)});
    validate(c, s.world);
    INFO("world " << s.world << " tp " << s.tp << " pp " << s.pp << " cp " << s.cp);
    CHECK(c.parallel.dp == s.world / (s.tp * s.pp * s.cp));
  }
}

TEST_CASE("dp_auto_fails_when_world_does_not_divide", "[config][validate]") {
  RunConfig c = with({"parallel.tp=4"});
  REQUIRE_THROWS_WITH(validate(c, 6),
                      Contains("world size 6 is not divisible by") && Contains("= 4"));
}

TEST_CASE("explicit_dp_must_match_the_world", "[config][validate]") {
  RunConfig c = with({"parallel.dp=2", "parallel.tp=2"});
  REQUIRE_THROWS_WITH(validate(c, 8), Contains("= 4 does not match the world size 8"));
  RunConfig ok = with({"parallel.dp=2", "parallel.tp=2"});
  REQUIRE_NOTHROW(validate(ok, 4));
}

TEST_CASE("layouts_that_divide_are_valid", "[config][validate]") {
  require_valid({"parallel.tp=2"}, 2);
  require_valid({"parallel.tp=4", "parallel.sequence_parallel=true"}, 8);
  require_valid({"parallel.pp=2", "parallel.pipeline.microbatches=4"}, 2);
  require_valid({"parallel.pp=2", "parallel.pipeline.schedule=interleaved",
                 "parallel.pipeline.virtual_stages=2"},
                4);
  require_valid({"parallel.cp=2"}, 2);
  require_valid({"model.moe.num_experts=4", "parallel.ep=2"}, 2);
  require_valid({"model.moe.num_experts=4", "parallel.ep=4", "parallel.cp=2"}, 4);
}

TEST_CASE("sizes_that_do_not_divide_name_both_keys", "[config][validate]") {
  struct Case {
    std::vector<std::string> overrides;
    int world;
    const char* message;
  };
  const Case cases[] = {
      {{"model.n_head=6"}, 1, "model.d_model = 128 is not divisible by model.n_head = 6"},
      {{"model.n_head=8", "model.d_model=64", "parallel.tp=16"},
       16,
       "model.n_head = 8 is not divisible by parallel.tp = 16"},
      {{"model.n_head=6", "model.d_model=96", "parallel.tp=4"},
       4,
       "model.n_head = 6 is not divisible by parallel.tp = 4"},
      {{"model.n_head=2", "model.d_model=2", "model.ffn_mult=1", "parallel.tp=2"}, 2, ""},
      {{"model.n_head=3", "model.d_model=3", "model.ffn_mult=1", "parallel.tp=3"},
       3,
       "the padded vocabulary (model.vocab_size = 256 rounded up to a multiple of "
       "model.make_vocab_size_divisible_by = 128) 256 is not divisible by parallel.tp = 3 "
       "(wte's rows and the logits' columns split over the tp ranks: set "
       "model.make_vocab_size_divisible_by to a multiple of parallel.tp)"},
      {{"model.n_head=3", "model.d_model=3", "model.ffn_mult=1", "parallel.tp=3",
        "model.make_vocab_size_divisible_by=384"},
       3,
       ""},
      {{"model.n_layer=3", "parallel.pp=2"},
       2,
       "model.n_layer = 3 is not divisible by parallel.pp * parallel.pipeline.virtual_stages = 2"},
      {{"model.n_layer=4", "parallel.pp=2", "parallel.pipeline.schedule=interleaved",
        "parallel.pipeline.virtual_stages=4"},
       2,
       "model.n_layer = 4 is not divisible by parallel.pp * parallel.pipeline.virtual_stages = 8"},
      {{"model.seq_len=100", "parallel.cp=3"},
       3,
       "model.seq_len = 100 is not divisible by parallel.cp = 3"},
      {{"model.seq_len=6", "parallel.cp=2"},
       2,
       "model.seq_len = 6 is not divisible by 2 * parallel.cp = 4"},
      {{"model.moe.num_experts=3", "parallel.ep=2"},
       2,
       "model.moe.num_experts = 3 is not divisible by parallel.ep = 2"},
      {{"model.moe.num_experts=4", "parallel.ep=4", "parallel.tp=2"},
       4,
       "parallel.dp * parallel.cp = 2 is not divisible by parallel.ep = 4"},
      {{"parallel.ep=2"}, 2, "parallel.ep = 2 needs experts"},
      {{"parallel.pp=2", "train.micro_batch=6", "parallel.pipeline.microbatches=4"},
       2,
       "train.micro_batch = 6 is not divisible by parallel.pipeline.microbatches = 4"},
      {{"parallel.tp=2", "parallel.sequence_parallel=true", "model.seq_len=9"},
       2,
       "model.seq_len / parallel.cp = 9 is not divisible by parallel.tp = 2"},
      {{"parallel.pipeline.virtual_stages=2"}, 1, "needs parallel.pipeline.schedule = interleaved"},
      {{"parallel.pipeline.schedule=interleaved", "parallel.pipeline.virtual_stages=2"},
       1,
       "parallel.pipeline.virtual_stages = 2 needs parallel.pp > 1"},
      {{"parallel.pp=2", "parallel.pipeline.schedule=interleaved"},
       2,
       "needs parallel.pipeline.virtual_stages = 1 to be 2 or more"},
      {{"parallel.pp=4", "model.n_layer=8", "parallel.pipeline.schedule=interleaved",
        "parallel.pipeline.virtual_stages=2", "train.micro_batch=6",
        "parallel.pipeline.microbatches=6"},
       4,
       "parallel.pipeline.microbatches = 6 is not divisible by parallel.pp = 4"},
      {{"model.moe.num_experts=2", "model.moe.top_k=3"},
       1,
       "model.moe.top_k = 3 exceeds model.moe.num_experts = 2"},
      {{"precision.compute=fp8", "hardware.device=cuda", "model.d_model=144", "parallel.tp=2"},
       2,
       "model.d_model / parallel.tp"},
      // a pipeline piece's rows: 4 / 4 sequences of 24 tokens (the micro-batch's 96 would do)
      {{"precision.compute=fp8", "hardware.device=cuda", "parallel.pp=2", "train.micro_batch=4",
        "parallel.pipeline.microbatches=4", "model.seq_len=24"},
       2,
       "train.micro_batch / parallel.pipeline.microbatches * model.seq_len / parallel.cp, to be "
       "multiples of 16 (cuBLASLt's fp8 GEMMs); got d_model = 128, tp = 1, rows = 24"},
  };
  for (const Case& c : cases) {
    RunConfig cfg = with(c.overrides);
    INFO("world " << c.world << "\n" << to_yaml(cfg));
    if (std::string(c.message).empty())
      REQUIRE_NOTHROW(validate(cfg, c.world));
    else
      REQUIRE_THROWS_WITH(validate(cfg, c.world), Contains(c.message));
  }
}

TEST_CASE("micro_batch_need_not_divide_microbatches_without_pipeline", "[config][validate]") {
  require_valid({"train.micro_batch=6", "parallel.pipeline.microbatches=4"}, 1);
}

TEST_CASE("fp8_and_nccl_need_cuda", "[config][validate]") {
  RunConfig fp8 = with({"precision.compute=fp8"});
  REQUIRE_THROWS_WITH(validate(fp8, 1),
                      Contains("precision.compute = fp8 needs hardware.device = cuda"));
  RunConfig fp8_cuda = with({"precision.compute=fp8", "hardware.device=cuda"});
  REQUIRE_NOTHROW(validate(fp8_cuda, 1));
  RunConfig nccl = with({"distributed.backend=nccl"});
  REQUIRE_THROWS_WITH(validate(nccl, 1),
                      Contains("distributed.backend = nccl needs hardware.device = cuda"));
}

TEST_CASE("data_path_matching_no_file_names_key_and_path", "[config][validate]") {
  RunConfig c = with({"data.train=/nonexistent/shards/train_*.bin"});
  REQUIRE_THROWS_WITH(
      validate(c, 1),
      Contains("data.train = \"/nonexistent/shards/train_*.bin\"") && Contains("no file matches"));
  RunConfig v = with({"data.val=/nonexistent/val.bin"});
  REQUIRE_THROWS_WITH(validate(v, 1), Contains("data.val = \"/nonexistent/val.bin\""));
  // a file whose name holds glob characters is itself, not a pattern that matches nothing
  const std::string literal = std::filesystem::temp_directory_path() / "validate_run[1].bin";
  std::ofstream(literal) << "x";
  RunConfig l = with({"data.train=" + literal, "data.val=" + literal});
  CHECK_NOTHROW(validate(l, 1));
  std::filesystem::remove(literal);
  RunConfig s = with({"data.train=synthetic:markof"});
  REQUIRE_THROWS_WITH(validate(s, 1), Contains("data.train = \"synthetic:markof\"") &&
                                          Contains("did you mean 'synthetic:markov'?"));
  RunConfig u = with({"data.val=synthetic:uniform"});
  REQUIRE_NOTHROW(validate(u, 1));
}

// Token shards to train on and the default, synthetic, val data: the val loss would measure the
// synthetic source; refused while evals run.
TEST_CASE("shards_to_train_on_need_val_data_that_is_not_synthetic", "[config][validate]") {
  const fs::path dir = fs::temp_directory_path() / "trainer_config_val_test";
  fs::create_directories(dir);
  std::ofstream(dir / "train_000.bin") << "x";
  const std::string train = "data.train=" + (dir / "train_*.bin").string();
  RunConfig c = with({train});
  REQUIRE_THROWS_WITH(validate(c, 1),
                      Contains("data.val = \"synthetic:markov\" while data.train") &&
                          Contains("train.eval_every = 0"));
  RunConfig off = with({train, "train.eval_every=0"});
  CHECK_NOTHROW(validate(off, 1));
  RunConfig own = with({train, "data.val=" + (dir / "train_000.bin").string()});
  CHECK_NOTHROW(validate(own, 1));
  fs::remove_all(dir);
}

TEST_CASE("data_glob_matching_shards_is_valid", "[config][validate]") {
  const fs::path dir = fs::temp_directory_path() / "trainer_config_glob_test";
  fs::create_directories(dir);
  std::ofstream(dir / "train_000.bin") << "x";
  std::ofstream(dir / "train_001.bin") << "x";
  RunConfig c = with({"data.train=" + (dir / "train_*.bin").string(),
                      "data.val=" + (dir / "train_001.bin").string()});
  CHECK_NOTHROW(validate(c, 1));
  fs::remove_all(dir);
}

TEST_CASE("init_from_must_exist", "[config][validate]") {
  RunConfig c = with({"model.init_from=/nonexistent/gpt2.bin"});
  REQUIRE_THROWS_WITH(validate(c, 1),
                      Contains("model.init_from = \"/nonexistent/gpt2.bin\": no such file"));
}

TEST_CASE("an_output_dir_that_cannot_be_created_is_refused_and_a_check_leaves_nothing",
          "[config][validate]") {
  // /proc takes no new directories, whoever asks: root's access() says it is writable, so for
  // root the check must try.
  CHECK_THROWS_AS(check_output_dir("run.out_dir", "/proc/trainer_out/x"), ConfigError);
  CHECK_THROWS_WITH(
      check_output_dir("run.out_dir", "/proc/trainer_out/x"),
      Contains(::geteuid() == 0 ? "run.out_dir = \"/proc/trainer_out/x\": cannot create it in /proc"
                                : "run.out_dir = \"/proc/trainer_out/x\": /proc is not writable"));
  const fs::path root = fs::temp_directory_path() / "trainer_output_dir_check_test";
  fs::remove_all(root);
  fs::create_directories(root);
  CHECK_NOTHROW(check_output_dir("run.out_dir", (root / "a/b/c").string()));
  CHECK(fs::is_empty(root));  // its probe made and taken away again
  fs::create_directory_symlink(root / "gone", root / "link");  // a link whose target is missing
  CHECK_THROWS_WITH(check_output_dir("run.out_dir", (root / "link").string()),
                    Contains("link\": a symbolic link to " + (root / "gone").string() +
                             ", which does not exist"));
  fs::remove_all(root);
}

TEST_CASE("an_output_dir_whose_files_would_pass_the_path_limits_is_refused_at_the_start",
          "[config][validate]") {
  // Found before training, not when the first checkpoint's file name is too long for the system.
  const std::string name(200, 'a');  // each part a legal file name
  std::string deep = "/tmp";
  while (deep.size() + 128 < 4096) deep += "/" + name;
  CHECK_THROWS_WITH(check_output_dir("run.out_dir", deep),
                    Contains("characters; the files a run writes below it take up to 128 more") &&
                        Contains("4095 for a path (PATH_MAX)"));
  CHECK_NOTHROW(check_output_dir("run.out_dir", deep.substr(0, 4096 - 128 - 250)));
  CHECK_THROWS_WITH(check_output_dir("checkpoint.dir", "/tmp/" + std::string(256, 'b') + "/c"),
                    Contains("checkpoint.dir = \"/tmp/bbbb") && Contains("has 256 characters") &&
                        Contains("NAME_MAX"));
}

TEST_CASE("input_files_that_cannot_be_read_as_files_are_named_for_what_they_are",
          "[config][validate]") {
  const fs::path dir = fs::temp_directory_path() / "trainer_config_input_files_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "model.safetensors", pipe = dir / "pipe";
  std::ofstream(file) << "x";
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  CHECK(input_file_problem(file.string()).empty());
  CHECK(input_file_problem((dir / "none").string()) == "no such file");
  CHECK(input_file_problem(dir.string()) == "is a directory");
  // A pipe exists (bash's <(...) gives one): not "no such file".
  CHECK(input_file_problem(pipe.string()) == "is not a regular file (a pipe, socket or device)");
  RunConfig c = with({"model.init_from=" + pipe.string()});
  CHECK_THROWS_WITH(validate(c, 1), Contains("model.init_from = \"" + pipe.string() +
                                             "\": is not a regular file (a pipe"));
  fs::remove_all(dir);
}

TEST_CASE("validation_creates_no_files", "[config][validate]") {
  const fs::path out = fs::temp_directory_path() / "trainer_config_no_files_test";
  fs::remove_all(out);
  RunConfig c = with({"run.out_dir=" + out.string(), "checkpoint.dir=" + (out / "ck").string()});
  validate(c, 1);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("mixture_of_experts_runs_on_dp_ep_and_pp_and_names_what_it_refuses", "[config][moe]") {
  const std::vector<std::string> moe = {"model.moe.num_experts=4"};
  auto runnable = [&](std::vector<std::string> more, int world) {
    more.insert(more.begin(), moe.begin(), moe.end());
    RunConfig c = with(more);
    validate(c, world);
    check_runnable(c);
  };
  REQUIRE_NOTHROW(runnable({}, 1));
  REQUIRE_NOTHROW(runnable({"parallel.ep=2"}, 2));
  REQUIRE_NOTHROW(runnable({"parallel.ep=2", "parallel.pp=2"}, 4));
  REQUIRE_NOTHROW(runnable({"parallel.zero=3"}, 2));  // ep 1: the experts are plain replicas
  REQUIRE_THROWS_WITH(runnable({"parallel.tp=2"}, 2),
                      Contains("model.moe.num_experts = 4 with parallel.tp = 2 needs "
                               "parallel.sequence_parallel = true"));
  REQUIRE_NOTHROW(runnable({"parallel.tp=2", "parallel.sequence_parallel=true"}, 2));
  REQUIRE_THROWS_WITH(
      runnable({"parallel.tp=2", "parallel.sequence_parallel=true", "train.micro_batch=3"}, 2),
      Contains("the sequences of a forward (train.micro_batch = 3) must be "
               "divisible by parallel.tp"));
  REQUIRE_THROWS_WITH(
      runnable({"parallel.tp=2", "parallel.sequence_parallel=true", "parallel.pp=2",
                "train.micro_batch=4", "parallel.pipeline.microbatches=4"},
               4),
      Contains("(train.micro_batch / parallel.pipeline.microbatches = 1) must be divisible"));
  REQUIRE_NOTHROW(runnable({"parallel.cp=2"}, 2));
  REQUIRE_NOTHROW(runnable({"parallel.cp=2", "parallel.ep=2"}, 2));
  REQUIRE_NOTHROW(runnable({"precision.compute=fp8", "hardware.device=cuda"}, 1));
  REQUIRE_NOTHROW(runnable({"precision.compute=fp8", "hardware.device=cuda", "parallel.ep=2"}, 2));
  for (const char* zero : {"parallel.zero=1", "parallel.zero=2", "parallel.zero=3"})
    REQUIRE_NOTHROW(runnable({"parallel.ep=2", zero}, 2));
}

// A peak below any device's or above any device's would make MFU figures of 1e26 or 1e-26.
TEST_CASE("peak_tflops_outside_what_devices_do_is_refused", "[config][validate]") {
  REQUIRE_THROWS_WITH(
      with({"hardware.peak_tflops=1e-30"}),
      Contains(
          "hardware.peak_tflops = 1e-30: must be in [0.0001, 100000] or auto (also written 0)"));
  REQUIRE_THROWS_WITH(with({"hardware.peak_tflops=1e9"}), Contains("hardware.peak_tflops"));
  RunConfig h200 = with({"hardware.peak_tflops=989"}),
            measured = with({"hardware.peak_tflops=auto"});
  REQUIRE_NOTHROW(validate(h200, 1));
  REQUIRE_NOTHROW(validate(measured, 1));
}

// A value outside a list of choices names them; a spelling hint only for words (4 is not a
// misspelt 0, and "on" is close to "none").
TEST_CASE("a_value_outside_the_choices_names_them_and_hints_only_for_words", "[config][validate]") {
  REQUIRE_THROWS_WITH(
      with({"parallel.zero=4"}),
      Contains("parallel.zero = 4: must be one of 0, 1, 2, 3") && !Contains("did you mean"));
  REQUIRE_THROWS_WITH(with({"activation_checkpointing=nnoe"}), Contains("did you mean 'none'?"));
}

// An environment variable set for one test case, unset when it ends (a failed REQUIRE included).
struct EnvSet {
  const char* name;
  EnvSet(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
  ~EnvSet() { ::unsetenv(name); }
};

// run.deterministic holds everywhere but for cuDNN's attention, whose backward uses atomics, and
// GEMM algorithms picked by timing.
TEST_CASE("a_deterministic_run_refuses_cudnn_attention_and_gemm_autotuning", "[config][validate]") {
  RunConfig c = with({"hardware.device=cuda", "run.deterministic=true"});
  RunConfig free = with({"hardware.device=cuda"});
  {
    const EnvSet cudnn("TRAINER_ATTENTION", "cudnn");
    CHECK_THROWS_WITH(validate(c, 1),
                      Contains("run.deterministic = true, but TRAINER_ATTENTION = cudnn"));
    CHECK_NOTHROW(validate(free, 1));
  }
  {
    const EnvSet tuned("TRAINER_GEMM_AUTOTUNE", "1");
    CHECK_THROWS_WITH(validate(c, 1),
                      Contains("run.deterministic = true, but TRAINER_GEMM_AUTOTUNE = 1"));
  }
  CHECK_NOTHROW(validate(c, 1));
}
