// Checkpoint save/load without a training run: a layout's flat buffer written as one or several
// "ranks" must read back identically through the global reader, whatever grid reads it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>

#include "runtime/ckpt/checkpoint.h"
#include "runtime/ckpt/export.h"
#include "runtime/ckpt/reshard.h"
#include "runtime/config/run_config.h"
#include "runtime/parallel/zero_shard.h"
#include "tests/unit/temp_dir.h"

using namespace trainer;
using namespace trainer::ckpt;
namespace fs = std::filesystem;

namespace {

model::GptDims small_dims() {
  model::GptDims d;
  d.vocab = 50;
  d.seq_len = 8;
  d.n_layer = 2;
  d.d_model = 8;
  d.n_head = 2;
  return d;
}

struct State {
  std::vector<float> p, m, v;
  explicit State(int64_t n) : p(n), m(n), v(n) {
    for (int64_t i = 0; i < n; ++i) {
      p[i] = 0.001f * static_cast<float>(i) - 1.0f;
      m[i] = static_cast<float>(i % 97) * 0.5f;
      v[i] = 1.0f / static_cast<float>(i + 1);
    }
  }
};

std::string fresh_dir(const std::string& name) {
  static const trainer::testing::TempDir root("ckpt");  // removed at the test's exit
  const fs::path dir = root.path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Writes `state` as `ranks` ZeRO-style shards (like save_checkpoint on `ranks` processes).
std::string write_sharded(const std::string& root, const model::ParamLayout& layout, State& s,
                          int ranks, int64_t step = 5) {
  Manifest m;
  m.step = step;
  m.tokens = 640;
  m.adam_step = 5;
  m.model = layout.dims();
  m.grid = {ranks, ranks, 1, 1, 1, ranks > 1 ? 1 : 0};
  m.loader = {0, 128, 0};
  const std::string tmp = begin_checkpoint(root, m.step);
  std::vector<ShardFile> shards;
  for (int r = 0; r < ranks; ++r) {
    const auto [b, e] = owned_range(layout.total_numel(), r, m.grid);
    shards.push_back(write_shard_file(tmp, r, layout,
                                      {{b, e, s.p.data() + b, s.m.data() + b, s.v.data() + b}}, m));
  }
  return commit_checkpoint(root, m, layout, shards, 2);
}

void flip_one_bit(const std::string& path, int64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(at);
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("pieces_of_range_cover_exactly_the_range_in_layout_order") {
  const model::GptDims d = small_dims();
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  const int64_t total = layout.total_numel();
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, total}, {7, total / 3}, {total / 3, total}}) {
    int64_t covered = 0, last_end = b;
    for (const auto& p : pieces_of_range(layout, b, e)) {
      const int64_t start = layout.find(p.tensor).offset + p.a;
      CHECK(start == last_end);
      last_end = start + (p.b - p.a);
      covered += p.b - p.a;
    }
    INFO("range " << b << ".." << e);
    CHECK(covered == e - b);
  }
}

TEST_CASE("sharded_checkpoint_reads_back_bit_identical_on_any_dp_split") {
  const model::GptDims d = small_dims();
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  const int64_t n = layout.total_numel();
  State src(n);
  const std::string dir = write_sharded(fresh_dir("three"), layout, src, 3);
  verify_checkpoint(dir);
  for (const Grid g : {Grid{1, 1, 1, 1, 1, 0}, Grid{4, 4, 1, 1, 1, 1}, Grid{2, 2, 1, 1, 1, 3}}) {
    State got(n);
    std::fill(got.p.begin(), got.p.end(), 0.0f);
    std::fill(got.m.begin(), got.m.end(), 0.0f);
    std::fill(got.v.begin(), got.v.end(), 0.0f);
    CheckpointReader reader(dir);
    for (int r = 0; r < g.world; ++r) {
      const auto [b, e] = owned_range(n, r, g);
      reader.read_owned(layout, {b, e, got.p.data() + b, got.m.data() + b, got.v.data() + b});
    }
    INFO("read as " << g.describe());
    CHECK(got.p == src.p);
    CHECK(got.m == src.m);
    CHECK(got.v == src.v);
  }
}

namespace {

// One tp slice's flat buffers, cut from the whole model's (`whole`, laid out by `whole_layout`).
State tp_slice_of(const model::ParamLayout& whole_layout, const State& whole,
                  const model::ParamLayout& slice) {
  State out(slice.total_numel());
  for (const model::ParamSpec& spec : slice.params()) {
    const int64_t from = whole_layout.find(spec.name).offset;
    model::extract_local(spec, whole.p.data() + from, out.p.data() + spec.offset);
    model::extract_local(spec, whole.m.data() + from, out.m.data() + spec.offset);
    model::extract_local(spec, whole.v.data() + from, out.v.data() + spec.offset);
  }
  return out;
}

// Reads `dir` into the tp slice `slice` through `dp` ZeRO-1 owners and checks it against `want`.
void check_reads_as(const std::string& dir, const model::ParamLayout& slice, const State& want,
                    int dp) {
  const int64_t n = slice.total_numel();
  State got(n);
  std::fill(got.p.begin(), got.p.end(), -7.0f);
  std::fill(got.m.begin(), got.m.end(), -7.0f);
  std::fill(got.v.begin(), got.v.end(), -7.0f);
  CheckpointReader reader(dir);
  const Grid g{dp, dp, 1, 1, 1, dp > 1 ? 1 : 0};
  for (int r = 0; r < dp; ++r) {
    const auto [b, e] = owned_range(n, r, g);
    reader.read_owned(slice, {b, e, got.p.data() + b, got.m.data() + b, got.v.data() + b});
  }
  INFO("read as tp rank " << slice.shard().tp_rank << " of " << slice.shard().tp_size << ", dp "
                          << dp);
  CHECK(got.p == want.p);
  CHECK(got.m == want.m);
  CHECK(got.v == want.v);
}

}  // namespace

// A dp 2 x tp 2 checkpoint (each rank saving its ZeRO-1 range of its tp slice, wte's vocabulary
// rows included) holds every element once (the tensors all tp ranks hold whole are saved by tp
// rank 0 only), and reads back
// bit-identical as the whole model, as tp 2 and tp 4 slices, and after an offline reshard to tp 4.
TEST_CASE("tp_sliced_checkpoint_reads_back_on_any_tp_and_dp_split") {
  model::GptDims d = small_dims();
  d.n_head = 4;          // head size 2: tp 4 divides the heads and the MLP width 32
  d.vocab_multiple = 4;  // 52 rows of wte (2 of padding): tp 4 divides them, 13 per tp rank
  const model::ParamLayout whole(d, model::GptShard::whole(d));
  const State src(whole.total_numel());
  Manifest m;
  m.step = 5;
  m.model = d;
  m.grid = {4, 2, 2, 1, 1, 1};
  const std::string root = fresh_dir("tp2");
  const std::string tmp = begin_checkpoint(root, m.step);
  std::vector<ShardFile> shards;
  for (int r = 0; r < 4; ++r) {
    const model::ParamLayout slice(d, model::GptShard::tp_slice(d, r % 2, 2));
    State local = tp_slice_of(whole, src, slice);
    const auto [b, e] = owned_range(slice.total_numel(), r / 2, m.grid);
    shards.push_back(write_shard_file(
        tmp, r, slice, {{b, e, local.p.data() + b, local.m.data() + b, local.v.data() + b}}, m));
  }
  const std::string dir = commit_checkpoint(root, m, whole, shards, 2);
  const Manifest saved = verify_checkpoint(dir);
  std::map<std::string, int64_t> saved_elements;
  for (const ShardFile& f : saved.shards)
    for (const Piece& p : f.pieces) saved_elements[p.tensor] += p.b - p.a;
  for (const model::ParamSpec& spec : whole.params()) {
    INFO(spec.name);
    CHECK(saved_elements[spec.name] == spec.numel);
  }
  check_reads_as(dir, whole, src, 1);
  check_reads_as(dir, whole, src, 3);
  for (int tp : {2, 4})
    for (int t = 0; t < tp; ++t) {
      const model::ParamLayout slice(d, model::GptShard::tp_slice(d, t, tp));
      check_reads_as(dir, slice, tp_slice_of(whole, src, slice), 3);
    }
  const std::string out = reshard_checkpoint(dir, parse_grid("dp=1,tp=4"), fresh_dir("tp4"));
  CHECK(verify_checkpoint(out).shards.size() == 4);
  check_reads_as(out, whole, src, 2);
  CHECK_THROWS_AS(reshard_checkpoint(dir, parse_grid("tp=8"), fresh_dir("tp8")),
                  trainer::config::ConfigError);
  // seq_len 8: cp 2 and 4 cut it into 2 * cp chunks; cp 3 cannot (and cp 8 would need 16)
  CHECK(verify_checkpoint(reshard_checkpoint(dir, parse_grid("cp=4"), fresh_dir("cp4")))
            .shards.size() == 4);
  for (const char* cp : {"cp=3", "cp=8"})
    CHECK_THROWS_WITH(reshard_checkpoint(dir, parse_grid(cp), fresh_dir("cp_bad")),
                      Catch::Contains("2 * cp must divide the model's seq_len (8)"));
}

TEST_CASE("offline_reshard_writes_one_file_per_new_rank_with_the_same_values") {
  const model::GptDims d = small_dims();
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  State src(layout.total_numel());
  const std::string dir = write_sharded(fresh_dir("src"), layout, src, 2);
  const std::string out = reshard_checkpoint(dir, parse_grid("dp=4,zero=1"), fresh_dir("dst"));
  const Manifest m = verify_checkpoint(out);
  CHECK(m.shards.size() == 4);
  CHECK(m.grid.dp == 4);
  CHECK(m.loader == data::LoaderState{0, 128, 0});
  CheckpointReader a(dir), b(out);
  for (const auto& t : a.manifest().tensors) {
    const int64_t count = layout.find(t.name).numel;
    std::vector<float> x(count), y(count);
    a.read_global("v", t.name, 0, count, x.data());
    b.read_global("v", t.name, 0, count, y.data());
    INFO(t.name);
    CHECK(x == y);
  }
  // Each new rank's file holds what that rank owns when it resumes: the runtime's cut (equal
  // chunks, the remainder on the last replica), here of a buffer 3 replicas do not divide.
  const int64_t n = layout.total_numel();
  REQUIRE(n % 3 != 0);
  const Manifest m3 =
      verify_checkpoint(reshard_checkpoint(dir, parse_grid("dp=3,zero=1"), fresh_dir("dst3")));
  REQUIRE(m3.shards.size() == 3);
  for (const ShardFile& f : m3.shards) {
    int64_t held = 0;
    for (const Piece& p : f.pieces) held += p.b - p.a;
    INFO("rank " << f.rank);
    CHECK(held == parallel::ZeroShards(n, 3).shard(f.rank).size());
  }
}

// A tp the vocabulary does not split into equal shards (51 rows of wte, no padding) is refused
// before anything is written, naming the padded vocabulary.
TEST_CASE("offline_reshard_refuses_a_tp_that_does_not_divide_the_padded_vocabulary") {
  model::GptDims d = small_dims();
  d.vocab = 51;  // n_head 2 and the MLP width 32 divide by 2: only the vocabulary does not
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  State src(layout.total_numel());
  const std::string dir = write_sharded(fresh_dir("odd_vocab"), layout, src, 1);
  const std::string out = fresh_dir("odd_vocab_tp2");
  CHECK_THROWS_WITH(
      reshard_checkpoint(dir, parse_grid("tp=2"), out),
      Catch::Contains("--to tp=2") && Catch::Contains("padded vocabulary (51 rows of wte)"));
  CHECK(fs::is_empty(out));
}

TEST_CASE("bit_flip_and_truncation_of_a_shard_are_detected") {
  const model::GptDims d = small_dims();
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  State src(layout.total_numel());
  const std::string dir = write_sharded(fresh_dir("bad"), layout, src, 2);
  const std::string file = dir + "/rank_00001.safetensors";
  const auto size = static_cast<int64_t>(fs::file_size(file));
  flip_one_bit(file, size - 5);
  CHECK_THROWS_WITH(verify_checkpoint(dir),
                    Catch::Contains("sha256") && Catch::Contains("rank_00001"));
  fs::resize_file(file, static_cast<uintmax_t>(size - 100));
  CHECK_THROWS_WITH(verify_checkpoint(dir), Catch::Contains("truncated"));
  fs::remove(dir + "/manifest.json");
  CHECK_THROWS_WITH(verify_checkpoint(dir), Catch::Contains("no manifest.json"));
}

// A manifest edited by hand (or damaged) whose files still pass their checksums: its model, its
// tensor list and its pieces must agree, or verify names what does not.
TEST_CASE("a_manifest_whose_parts_disagree_is_refused_naming_the_part") {
  const model::GptDims d = small_dims();
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  State src(layout.total_numel());
  const std::string dir = write_sharded(fresh_dir("edited"), layout, src, 2);
  const nlohmann::json good = nlohmann::json::parse(std::ifstream(dir + "/manifest.json"));
  auto verify_edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    std::ofstream(dir + "/manifest.json") << j.dump(1);
    std::string error;
    try {
      verify_checkpoint(dir);
    } catch (const CheckpointError& e) {
      error = e.what();
    }
    return error;
  };
  CHECK(verify_edited([](nlohmann::json&) {}).empty());
  CHECK_THAT(verify_edited([](nlohmann::json& j) { j["model"]["n_layer"] = 3; }),
             Catch::Contains("manifest.json: lists") && Catch::Contains("tensors; its model has"));
  CHECK_THAT(verify_edited([](nlohmann::json& j) {
               j["tensors"][0]["global_shape"] = {1000000, 1000000};
             }),
             Catch::Contains("has shape [1000000x1000000]; its model gives"));
  CHECK_THAT(
      verify_edited([](nlohmann::json& j) { j["shards"][0]["pieces"][0]["range"][1] = 1 << 30; }),
      Catch::Contains("rank_00000.safetensors lists elements"));
  CHECK_THAT(verify_edited([](nlohmann::json& j) { j["model"]["n_head"] = 0; }),
             Catch::Contains("sizes are not a model"));
  // Numbers no run writes (the directory is step_00000005).
  CHECK_THAT(verify_edited([](nlohmann::json& j) { j["step"] = -1; }),
             Catch::Contains("manifest.json: step -1 is not the directory's (step_00000005)"));
  CHECK_THAT(verify_edited([](nlohmann::json& j) { j["step"] = 7; }),
             Catch::Contains("step 7 is not the directory's (step_00000005)"));
  CHECK_THAT(verify_edited([](nlohmann::json& j) { j["tokens"] = -5; }),
             Catch::Contains("tokens -5 and adam_step 5 must be >= 0"));
  CHECK_THAT(verify_edited([](nlohmann::json& j) { j["grid"]["dp"] = 0; }),
             Catch::Contains("grid world 2 (dp 0 tp 1 pp 1 cp 1, zero 1) is not a layout"));
  CHECK_THAT(verify_edited([](nlohmann::json& j) { j["loader"]["offset"] = -128; }),
             Catch::Contains("the loader's position (shard 0, offset -128, epoch 0) is negative"));
  // A missing or mistyped field is named without the JSON library's exception id.
  const std::string missing = verify_edited([](nlohmann::json& j) { j["grid"].erase("world"); });
  CHECK_THAT(missing, Catch::Contains("manifest.json: invalid manifest: key 'world' not found"));
  CHECK_THAT(missing, !Catch::Contains("json.exception"));
  CHECK_THAT(verify_edited([](nlohmann::json& j) { j["step"] = "x"; }),
             Catch::Contains("invalid manifest: type must be number, but is string"));
}

TEST_CASE("keep_prunes_to_the_newest_complete_checkpoints_and_tmp_dirs_are_not_listed") {
  const model::GptDims d = small_dims();
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  State src(layout.total_numel());
  const std::string root = fresh_dir("keep");
  for (int step : {10, 20, 30}) write_sharded(root, layout, src, 1, step);
  fs::create_directories(root + "/step_00000040.tmp");
  // A user's copies are not checkpoints: neither taken as the newest nor counted by keep.
  fs::create_directories(root + "/step_00000050.bak");
  fs::create_directories(root + "/step_0000006");
  fs::create_directories(root + "/step_0000007x");
  std::vector<std::string> incomplete;
  const auto all = list_checkpoints(root, &incomplete);
  REQUIRE(all.size() == 2);
  CHECK(fs::path(all[0]).filename() == "step_00000030");
  CHECK(fs::path(all[1]).filename() == "step_00000020");
  CHECK(incomplete.size() == 1);
  CHECK(resolve_step_dir(root) == all[0]);
  CHECK(fs::exists(root + "/step_00000050.bak"));
  CHECK(step_of_dir_name("step_00000030") == 30);
  CHECK(step_of_dir_name("step_123456789") == 123456789);  // past 8 digits, still a step
  CHECK(step_of_dir_name("step_0000003") == -1);
  CHECK(step_of_dir_name("step_00000030.bak") == -1);
}

TEST_CASE("a_checkpoint_missing_a_rank_s_file_where_rank_0_looks_is_not_committed") {
  // A rank whose checkpoint.dir is another directory than rank 0's (node-local) wrote elsewhere:
  // rank 0 must not commit a manifest listing a file it cannot see, nor one of another size.
  const model::GptDims d = small_dims();
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  State src(layout.total_numel());
  const std::string root = fresh_dir("missing_rank_file");
  Manifest m;
  m.step = 7;
  m.model = layout.dims();
  m.grid = {2, 2, 1, 1, 1, 1};
  for (const bool truncate : {false, true}) {
    const std::string tmp = begin_checkpoint(root, m.step);
    std::vector<ShardFile> shards;
    for (int r = 0; r < 2; ++r) {
      const auto [b, e] = owned_range(layout.total_numel(), r, m.grid);
      shards.push_back(write_shard_file(
          tmp, r, layout, {{b, e, src.p.data() + b, src.m.data() + b, src.v.data() + b}}, m));
    }
    if (truncate)
      fs::resize_file(tmp + "/" + shards[1].file, 100);
    else
      fs::remove(tmp + "/" + shards[1].file);
    CHECK_THROWS_WITH(commit_checkpoint(root, m, layout, shards, 2),
                      Catch::Contains("checkpoint not committed: rank 1 wrote " + shards[1].file) &&
                          Catch::Contains(truncate ? "rank 0 finds 100 bytes" : "no such file") &&
                          Catch::Contains("every rank must see the same checkpoint.dir"));
    CHECK_FALSE(fs::exists(root + "/step_00000007"));
    CHECK(list_checkpoints(root).empty());
  }
}

TEST_CASE("reshard_grid_spec_errors_are_config_errors_naming_the_item") {
  CHECK(parse_grid("dp=4,zero=1").dp == 4);
  CHECK(parse_grid("dp=2,tp=2,zero=1").world == 4);
  CHECK(parse_grid("dp=2,pp=2,tp=2,zero=1").world == 8);
  CHECK(parse_grid("dp=2,cp=2,tp=2,zero=1").world == 8);
  CHECK(parse_grid("dp=4,ep=2,zero=3").ep == 2);  // ZeRO under expert parallelism
  for (const char* bad : {"dp=abc", "dp=4x", "dp=", "dp", "mp=2", "dp=0", "zero=4", "cp=0", "tp=0",
                          "pp=0", "pp=2,zero=2", "dp=2,dp=3", "dp=200000", "dp=3,ep=2"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_grid(bad), trainer::config::ConfigError);
    CHECK_THROWS_WITH(parse_grid(bad), Catch::Contains(std::string("--to ") + bad));
  }
  CHECK_THROWS_WITH(parse_grid("dp=abc"), Catch::Contains("dp must be an integer"));
  CHECK_THROWS_WITH(parse_grid("dp=99999999999"),
                    Catch::Contains("dp is out of range (dp in [1, 65536]"));
  CHECK_THROWS_WITH(parse_grid("dp=65536,cp=1024"),
                    Catch::Contains("dp * pp * cp * tp = 67108864 ranks, more than 1048576"));
  // Keys left out keep the source's grid.
  Grid from;
  from.dp = 2, from.zero = 1, from.world = 2;
  const Grid tp2 = parse_grid("tp=2", from);
  CHECK((tp2.dp == 2 && tp2.tp == 2 && tp2.zero == 1 && tp2.world == 4));
  CHECK(parse_grid("ep=2", from).ep == 2);  // dp 2 (kept) is what ep must divide
  CHECK_THROWS(parse_grid("ep=2"));
  CHECK_THROWS_WITH(parse_grid(""), Catch::Contains("empty"));
}

TEST_CASE("model_difference_names_each_differing_key") {
  model::GptDims a = small_dims(), b = small_dims();
  CHECK(model_difference(a, b).empty());
  b.n_layer = 3;
  CHECK_THAT(model_difference(a, b), Catch::Contains("model.n_layer 2 (checkpoint) vs 3 (config)"));

  // A dense checkpoint into a mixture of experts and back: the number of experts (0, dense).
  model::GptDims moe = small_dims();
  moe.num_experts = 4;
  CHECK(model_difference(a, moe) == "model.moe.num_experts 0 (checkpoint) vs 4 (config)");
  CHECK(model_difference(moe, a) == "model.moe.num_experts 4 (checkpoint) vs 0 (config)");
  // The mixture's routing and loss settings change training, not the tensors.
  model::GptDims routed = moe;
  routed.top_k = 1;
  routed.capacity_factor = 2.0;
  routed.aux_loss_coef = 0.02;
  CHECK(model_difference(moe, routed).empty());

  // The vocabulary's multiple matters only where it changes wte's padded rows (50 -> 64).
  model::GptDims padded = small_dims();
  padded.vocab_multiple = 2;  // 50 rows either way
  CHECK(model_difference(a, padded).empty());
  padded.vocab_multiple = 64;
  CHECK(model_difference(a, padded) ==
        "model.make_vocab_size_divisible_by 1 (checkpoint) vs 64 (config)");
}

TEST_CASE("hf_and_llmc_exports_read_back_to_the_same_weights") {
  const model::GptDims d = small_dims();
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  State src(layout.total_numel());
  const std::string dir = write_sharded(fresh_dir("exp"), layout, src, 2);
  CheckpointReader reader(dir);
  const GlobalWeights w = read_weights(reader);
  const std::string hf = fresh_dir("exp_out") + "/model.safetensors";
  const std::string llmc = fs::path(hf).parent_path().string() + "/model.bin";
  write_hf_safetensors(hf, d, w);
  write_llmc(llmc, d, w);
  CHECK(read_weight_file(hf, d) == w);
  CHECK(read_weight_file(llmc, d) == w);
  // HF Conv1D weights are [in, out]
  SafetensorsReader r(hf);
  CHECK(r.info("h.0.mlp.c_fc.weight").shape == std::vector<int64_t>{d.d_model, 4 * d.d_model});
  // llm.c: 256 int32 header + (params with wte padded to a multiple of 128 rows) * 4 bytes
  const int64_t vp = 128;
  const int64_t expect = 256 * 4 + (layout.total_numel() + (vp - d.vocab) * d.d_model) * 4;
  CHECK(static_cast<int64_t>(fs::file_size(llmc)) == expect);
  // Another number of blocks, more or fewer (fewer would read the file's first blocks and
  // drop the rest), is refused by both formats.
  for (int n_layer : {3, 1}) {
    model::GptDims other = d;
    other.n_layer = n_layer;
    const std::string why =
        "model.n_layer is 2 in the file, " + std::to_string(n_layer) + " in the config";
    CHECK_THROWS_WITH(read_weight_file(llmc, other), Catch::Contains(why));
    CHECK_THROWS_WITH(read_weight_file(hf, other), Catch::Contains(why));
  }
}

TEST_CASE("exports_hold_vocab_size_rows_whatever_the_models_vocab_padding") {
  model::GptDims padded = small_dims();
  padded.vocab_multiple = 16;  // wte: 64 rows in the model, 50 in every file
  const model::GptDims plain = small_dims();
  const model::ParamLayout layout(padded, model::GptShard::whole(padded));
  State src(layout.total_numel());
  const model::ParamSpec& wte = layout.find("wte.weight");
  REQUIRE(wte.global_shape[0] == 64);
  for (int64_t i = int64_t{padded.vocab} * padded.d_model; i < wte.numel; ++i)
    src.p[static_cast<size_t>(wte.offset + i)] = 0.0f;  // the model keeps its padding rows zero
  CheckpointReader reader(write_sharded(fresh_dir("pad"), layout, src, 2));
  const GlobalWeights w = read_weights(reader);
  const std::string hf = fresh_dir("pad_out") + "/model.safetensors";
  const std::string llmc = fs::path(hf).parent_path().string() + "/model.bin";
  write_hf_safetensors(hf, padded, w);
  write_llmc(llmc, padded, w);
  CHECK(SafetensorsReader(hf).info("wte.weight").shape ==
        std::vector<int64_t>{plain.vocab, plain.d_model});
  CHECK(read_weight_file(hf, padded) == w);
  CHECK(read_weight_file(llmc, padded) == w);
  // The files are the unpadded model's: it reads them, and they give it the same real rows.
  const GlobalWeights unpadded = read_weight_file(hf, plain);
  CHECK(read_weight_file(llmc, plain) == unpadded);
  const std::vector<float>& rows = unpadded.at("wte.weight");
  REQUIRE(rows.size() == static_cast<size_t>(plain.vocab * plain.d_model));
  CHECK(std::equal(rows.begin(), rows.end(), w.at("wte.weight").begin()));
  CHECK(unpadded.at("h.1.mlp.c_fc.weight") == w.at("h.1.mlp.c_fc.weight"));
}

// manifest.json reads back every field it writes: a field written and not read (a resume would
// silently lose it) makes the second JSON differ from the first.
TEST_CASE("a_manifest_reads_back_every_field_it_writes") {
  ckpt::Manifest m;
  m.step = 12, m.tokens = 6144, m.adam_step = 11, m.seed = 99;
  m.config_sha256 = "ab12", m.config_yaml = "train: {lr: 0.001}\n", m.run_id = "0123456789abcdef";
  m.model.n_layer = 2, m.model.num_experts = 4, m.model.top_k = 1, m.model.vocab_multiple = 128;
  m.grid = {8, 2, 2, 2, 1, 1, 2};
  m.loader = {1, 2048, 3};
  m.loader_global_batch_tokens = 1024;
  m.loader_shards = {{"train_000.bin", 100000}, {"train_001.bin", 90000}};
  m.loader_shuffle = true;
  m.resumes = {{4, 1, {"train.lr: 0.003 -> 0.001"}}, {8, 8, {"world: 1 -> 8"}}};
  m.tensors = {{"wte", {256, 64}}, {"wpe", {128, 64}}};
  m.shards = {{0, "rank_0.safetensors", "cd34", 4096, {{"wte", 0, {{0, 128}}, 0, 64}}}};
  m.fp8_scaling = {1.5f, 0.25f};
  const nlohmann::json written = ckpt::to_json(m);
  const ckpt::Manifest back = ckpt::manifest_from_json(written);
  CHECK(ckpt::to_json(back) == written);
  CHECK(back.resumes.size() == 2);
  CHECK(back.resumes[1].changes == std::vector<std::string>{"world: 1 -> 8"});
  CHECK(back.loader_global_batch_tokens == 1024);
}
