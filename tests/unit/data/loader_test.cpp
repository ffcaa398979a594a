#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "runtime/data/data_error.h"
#include "runtime/data/loader.h"
#include "runtime/data/shard_file.h"
#include "tests/unit/data/data_test_util.h"

using namespace trainer::data;
using namespace trainer::data::testing;
using Catch::Matchers::Contains;

namespace {

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

// Shard s holds tokens s*10000 + i: every token names its shard and position.
std::vector<std::vector<uint16_t>> write_test_shards(const TempDir& dir,
                                                     const std::vector<int>& sizes) {
  std::vector<std::vector<uint16_t>> shards;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint16_t> tokens;
    for (int i = 0; i < sizes[s]; ++i) tokens.push_back(static_cast<uint16_t>(s * 10000 + i));
    write_shard(dir.file("shard_" + std::to_string(s) + ".bin"), tokens);
    shards.push_back(tokens);
  }
  return shards;
}

// llm.c's loader, written out the plain way: the group's batch starts at `base` of the current
// shard; rank r reads B*T+1 tokens at base + r*B*T; when the group's next read would run past the
// shard's end, move to the next shard (wrapping around) and start over at 0.
struct ReferenceLoader {
  std::vector<std::vector<uint16_t>> shards;
  int64_t B, T, R, r;
  size_t shard = 0;
  int64_t base = 0;

  Batch next() {
    if (base + R * B * T + 1 > static_cast<int64_t>(shards[shard].size())) {
      shard = (shard + 1) % shards.size();
      base = 0;
    }
    Batch b;
    const int64_t pos = base + r * B * T;
    for (int64_t i = 0; i < B * T; ++i) {
      b.inputs.push_back(shards[shard][static_cast<size_t>(pos + i)]);
      b.targets.push_back(shards[shard][static_cast<size_t>(pos + i + 1)]);
    }
    base += R * B * T;
    return b;
  }
};

LoaderOptions file_options(const TempDir& dir, int64_t B, int64_t T, int r, int R) {
  return LoaderOptions{.source = dir.file("shard_*.bin"),
                       .micro_batch = B,
                       .seq_len = T,
                       .dp_rank = r,
                       .dp_size = R,
                       .vocab_size = 65536};
}

// Both sides are printed on failure (Catch stringifies the vectors only then).
void require_same(const Batch& got, const Batch& want) {
  REQUIRE(got.inputs == want.inputs);
  REQUIRE(got.targets == want.targets);
}

Batch next(DataLoader& loader) {
  Batch b;
  b.inputs.resize(static_cast<size_t>(loader.tokens_per_rank()));
  b.targets.resize(b.inputs.size());
  loader.next_batch(b.inputs.data(), b.targets.data());
  return b;
}

std::vector<Batch> next_batches(DataLoader& loader, int n) {
  std::vector<Batch> batches;
  for (int i = 0; i < n; ++i) batches.push_back(next(loader));
  return batches;
}

}  // namespace

TEST_CASE("loader_matches_llmc_reference_for_dp_1_2_4", "[data][loader]") {
  TempDir dir("llmc");
  // B*T = 8, so a group reads 8, 16 or 32 tokens + 1. Shards end mid-sample (100, 97), one token
  // after a sample (65, 33: the last sample just fits) and exactly on a sample boundary (96: the
  // last sample lacks its final target, so it must not be read).
  const auto shards = write_test_shards(dir, {100, 65, 96, 33, 97});
  for (int R : {1, 2, 4}) {
    for (int r = 0; r < R; ++r) {
      DataLoader loader(file_options(dir, 2, 4, r, R));
      ReferenceLoader ref{shards, 2, 4, R, r};
      for (int step = 0; step < 60; ++step) {
        INFO("R=" << R << " rank=" << r << " step=" << step);
        const Batch want = ref.next();
        const Batch got = next(loader);
        require_same(got, want);
      }
    }
  }
}

TEST_CASE("loader_counts_epochs_when_it_wraps_to_shard_0", "[data][loader]") {
  TempDir dir("epochs");
  write_test_shards(dir, {17, 17});  // B*T = 8: two batches per shard
  DataLoader loader(file_options(dir, 2, 4, 0, 1));
  std::vector<LoaderState> seen;
  for (int i = 0; i < 5; ++i) {
    next(loader);
    seen.push_back(loader.state());
  }
  const std::vector<LoaderState> want{{0, 8, 0}, {0, 16, 0}, {1, 8, 0}, {1, 16, 0}, {0, 8, 1}};
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("after batch " << i + 1 << ": got shard " << seen[i].shard << " offset " << seen[i].offset
                        << " epoch " << seen[i].epoch << ", want " << want[i].shard << " "
                        << want[i].offset << " " << want[i].epoch);
    CHECK(seen[i] == want[i]);
  }
}

// The loaders of one layout: dp ranks with micro-batch B, grad_accum micro-batches per step.
struct Layout {
  int dp;
  int64_t B;
  int64_t accum;
};

std::vector<std::unique_ptr<DataLoader>> layout_loaders(const LoaderOptions& base, Layout l) {
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int r = 0; r < l.dp; ++r) {
    LoaderOptions o = base;
    o.micro_batch = l.B;
    o.grad_accum = l.accum;
    o.dp_rank = r;
    o.dp_size = l.dp;
    ranks.push_back(std::make_unique<DataLoader>(o));
  }
  return ranks;
}

// One step's tokens, micro-batch by micro-batch and rank by rank.
Batch next_step(std::vector<std::unique_ptr<DataLoader>>& ranks, int64_t accum) {
  Batch joined;
  for (int64_t m = 0; m < accum; ++m) {
    for (auto& rank : ranks) {
      const Batch b = next(*rank);
      joined.inputs.insert(joined.inputs.end(), b.inputs.begin(), b.inputs.end());
      joined.targets.insert(joined.targets.end(), b.targets.begin(), b.targets.end());
    }
  }
  return joined;
}

// Every layout with a global batch of 8 sequences reads the same tokens at every step, across
// shard ends (shard_1's 150 tokens hold 4 global batches of 32 + 1 but 9 micro-batches of 16 + 1,
// so a per-micro-batch switch would split a step between shards) and epochs, shuffled or not.
TEST_CASE("global_batch_tokens_do_not_depend_on_the_layout", "[data][loader]") {
  TempDir dir("global");
  write_test_shards(dir, {300, 150, 200});
  const std::vector<Layout> layouts{{1, 8, 1}, {2, 4, 1}, {4, 2, 1}, {1, 4, 2},
                                    {2, 2, 2}, {4, 1, 2}, {1, 1, 8}};
  for (const bool shuffle : {false, true}) {
    for (const std::string& source : {dir.file("shard_*.bin"), std::string("synthetic:markov")}) {
      auto base = file_options(dir, 1, 4, 0, 1);
      base.source = source;
      if (is_synthetic_spec(source)) base.vocab_size = 256;  // quicker to build
      base.shuffle = shuffle;
      auto reference = layout_loaders(base, layouts[0]);
      std::vector<Batch> want;
      for (int step = 0; step < 40; ++step) want.push_back(next_step(reference, 1));
      for (const Layout& l : layouts) {
        auto ranks = layout_loaders(base, l);
        for (int step = 0; step < 40; ++step) {
          INFO(source << " shuffle=" << shuffle << " dp=" << l.dp << " B=" << l.B
                      << " accum=" << l.accum << " step=" << step);
          require_same(next_step(ranks, l.accum), want[static_cast<size_t>(step)]);
        }
      }
      // A state saved by one layout restores on another: after 13 steps (past shard_1's end) at
      // dp 4 x B 1 x accum 2, dp 2 x B 4 x accum 1 continues with the same tokens.
      auto saved_by = layout_loaders(base, {4, 1, 2});
      for (int step = 0; step < 13; ++step) next_step(saved_by, 2);
      auto resumed = layout_loaders(base, {2, 4, 1});
      for (auto& rank : resumed) rank->restore(saved_by.front()->state());
      for (int step = 13; step < 40; ++step) {
        INFO(source << " shuffle=" << shuffle << " resumed at step 13, step=" << step);
        require_same(next_step(resumed, 1), want[static_cast<size_t>(step)]);
      }
    }
  }
}

TEST_CASE("samples_per_epoch_counts_whole_global_batches", "[data][loader]") {
  TempDir dir("samples");
  write_test_shards(dir, {100, 65});
  auto o = file_options(dir, 2, 4, 0, 1);
  o.grad_accum = 2;  // 16 tokens a step: 99 / 16 = 6 and 64 / 16 = 4
  CHECK(DataLoader(o).samples_per_epoch() == 10);
  o.source = "synthetic:markov";
  o.vocab_size = 256;
  CHECK(DataLoader(o).samples_per_epoch() == std::numeric_limits<int64_t>::max());
}

// Passes read: the share of a pass's global batches behind the position, counted in the pass's
// shard order; a whole pass after every batch of it, shuffled or not.
TEST_CASE("passes_read_count_the_global_batches_behind_the_position", "[data][loader]") {
  TempDir dir("passes");
  write_test_shards(dir, {100, 65});  // 6 and 4 global batches of 16 tokens: 10 a pass
  for (const bool shuffle : {false, true}) {
    auto o = file_options(dir, 2, 4, 0, 1);
    o.grad_accum = 2;
    o.shuffle = shuffle;
    DataLoader loader(o);
    std::vector<int32_t> x(8), y(8);
    INFO("shuffle " << shuffle);
    CHECK(loader.passes_read() == 0.0);
    for (int step = 1; step <= 23; ++step) {
      for (int m = 0; m < 2; ++m) loader.next_batch(x.data(), y.data());
      CHECK(loader.passes_read() == Approx(step / 10.0));
    }
  }
  auto s = file_options(dir, 2, 4, 0, 1);
  s.source = "synthetic:markov";
  s.vocab_size = 256;
  CHECK(std::isnan(DataLoader(s).passes_read()));
}

TEST_CASE("restored_loader_continues_exactly_where_the_saved_one_stopped", "[data][loader]") {
  TempDir dir("restore");
  write_test_shards(dir, {100, 65, 97});
  for (const bool shuffle : {false, true}) {
    for (const std::string& source : {dir.file("shard_*.bin"), std::string("synthetic:markov")}) {
      auto options = file_options(dir, 2, 4, 1, 2);
      options.source = source;
      if (is_synthetic_spec(source)) options.vocab_size = 256;  // quicker to build
      options.shuffle = shuffle;
      DataLoader original(options);
      for (int i = 0; i < 23; ++i) next(original);  // past a shard switch and an epoch
      const LoaderState saved = original.state();

      DataLoader resumed(options);
      next(resumed);  // somewhere else first, to show restore does not depend on history
      resumed.restore(saved);
      CHECK(resumed.state() == saved);
      for (int i = 0; i < 30; ++i) {
        INFO(source << " shuffle=" << shuffle << " batch " << i << " after restore");
        const Batch want = next(original);
        const Batch got = next(resumed);
        require_same(got, want);
      }
    }
  }
}

TEST_CASE("restore_rejects_states_that_do_not_fit_the_data", "[data][loader]") {
  TempDir dir("badrestore");
  write_test_shards(dir, {100});
  DataLoader loader(file_options(dir, 2, 4, 0, 1));
  CHECK_THROWS_WITH(loader.restore({.shard = 3, .offset = 0, .epoch = 0}),
                    Contains("shard in [0, 1)"));
  CHECK_THROWS_WITH(loader.restore({.shard = 0, .offset = -8, .epoch = 0}),
                    Contains("negative offset"));
  auto shuffled_options = file_options(dir, 2, 4, 0, 1);
  shuffled_options.shuffle = true;
  DataLoader shuffled(shuffled_options);
  CHECK_THROWS_WITH(shuffled.restore({.shard = 0, .offset = 12, .epoch = 0}),
                    Contains("whole number of global batches"));
  CHECK_THROWS_WITH(loader.restore({.shard = 0, .offset = 800, .epoch = 0}),
                    Contains("holds only"));
}

// A resume with another global batch (micro_batch 2 -> 3 here) reads on from the saved token,
// and still moves to the next shard when a whole step no longer fits.
TEST_CASE("restore_with_another_global_batch_reads_on_from_the_saved_token", "[data][loader]") {
  TempDir dir("rebatch");
  write_test_shards(dir, {100, 65});
  DataLoader saved(file_options(dir, 2, 4, 0, 1));  // 8 tokens a step
  for (int i = 0; i < 5; ++i) next(saved);
  REQUIRE(saved.state() == LoaderState{0, 40, 0});
  DataLoader resumed(file_options(dir, 3, 4, 0, 1));  // 12 tokens a step
  resumed.restore(saved.state());
  std::vector<int32_t> starts;
  for (int i = 0; i < 6; ++i) starts.push_back(next(resumed).inputs.front());
  // 40, 52, 64, 76 fit in shard 0's 100 tokens (76 + 12 + 1 <= 100), 88 does not: shard 1.
  CHECK(starts == std::vector<int32_t>{40, 52, 64, 76, 10000, 10012});
}

TEST_CASE("shuffled_loader_is_deterministic_and_ranks_read_disjoint_tokens", "[data][loader]") {
  TempDir dir("shuffle");
  const auto shards = write_test_shards(dir, {257, 129, 193, 161});
  const int R = 2;
  auto options = [&](int r) {
    auto o = file_options(dir, 2, 4, r, R);
    o.shuffle = true;
    return o;
  };
  // One epoch: (256 + 128 + 192 + 160) / 16 = 46 global batches.
  const int epoch_batches = 46;
  std::vector<std::vector<Batch>> runs(R);
  for (int r = 0; r < R; ++r) {
    DataLoader loader(options(r));
    for (int i = 0; i < epoch_batches; ++i) runs[static_cast<size_t>(r)].push_back(next(loader));
    CHECK(loader.state().epoch == 0);
    DataLoader again(options(r));
    for (int i = 0; i < epoch_batches; ++i) {
      INFO("rank " << r << " batch " << i);
      require_same(next(again), runs[static_cast<size_t>(r)][static_cast<size_t>(i)]);
    }
  }
  std::multiset<int32_t> read;
  for (const auto& run : runs)
    for (const auto& b : run) read.insert(b.inputs.begin(), b.inputs.end());
  std::set<int32_t> distinct(read.begin(), read.end());
  CHECK(distinct.size() == read.size());  // no token read twice by any rank in one epoch
  std::set<int32_t> sequential_reads;     // and the same tokens as the unshuffled epoch
  for (int r = 0; r < R; ++r) {
    DataLoader loader(file_options(dir, 2, 4, r, R));
    for (int i = 0; i < epoch_batches; ++i) {
      const Batch b = next(loader);
      sequential_reads.insert(b.inputs.begin(), b.inputs.end());
    }
  }
  CHECK(distinct == sequential_reads);

  DataLoader sequential(file_options(dir, 2, 4, 0, R));
  int same_position = 0;
  for (const auto& b : runs[0]) same_position += next(sequential) == b;
  CHECK(same_position < epoch_batches / 2);  // the order really is shuffled
}

TEST_CASE("shuffle_order_changes_with_the_epoch_and_the_seed", "[data][loader]") {
  TempDir dir("shuffle_epochs");
  write_test_shards(dir, {161, 161, 161});  // 20 batches of 8 per shard
  auto o = file_options(dir, 2, 4, 0, 1);
  o.shuffle = true;
  DataLoader loader(o);
  const std::vector<Batch> epoch0 = next_batches(loader, 60), epoch1 = next_batches(loader, 60);
  CHECK(loader.state().epoch == 1);
  CHECK(epoch0 != epoch1);
  o.seed = 8;
  DataLoader other_seed(o);
  CHECK(next_batches(other_seed, 60) != epoch0);
}

// With one shard the shard order cannot change between passes: the samples within it must.
TEST_CASE("shuffle_order_within_a_shard_changes_with_the_epoch", "[data][loader]") {
  TempDir dir("shuffle_one_shard");
  write_test_shards(dir, {161});  // 20 batches of 8
  auto o = file_options(dir, 2, 4, 0, 1);
  o.shuffle = true;
  DataLoader loader(o);
  const std::vector<Batch> epoch0 = next_batches(loader, 20), epoch1 = next_batches(loader, 20);
  CHECK(loader.state().epoch == 1);
  CHECK(epoch0 != epoch1);
}

// Every eval reads the same val tokens in the same order: data.shuffle is for the train stream.
TEST_CASE("val_loader_is_never_shuffled", "[data][loader]") {
  TempDir dir("val_unshuffled");
  write_test_shards(dir, {161, 161});
  auto o = file_options(dir, 2, 4, 0, 1);
  o.is_val = true;
  DataLoader plain(o);
  o.shuffle = true;
  DataLoader shuffled(o);
  for (int i = 0; i < 40; ++i) {
    INFO("batch " << i);
    require_same(next(shuffled), next(plain));
  }
}

TEST_CASE("token_outside_vocab_is_an_error_naming_file_and_token", "[data][loader]") {
  TempDir dir("vocab");
  std::vector<uint16_t> tokens(50, 7);
  tokens[31] = 300;
  const std::string path = dir.file("big.bin");
  write_shard(path, tokens);
  auto o = file_options(dir, 2, 4, 0, 1);
  o.source = path;
  o.vocab_size = 256;
  CHECK_THROWS_AS(DataLoader(o), DataError);
  CHECK_THROWS_WITH(DataLoader(o), Contains(path) && Contains("token 300") &&
                                       Contains("position 31") && Contains("256"));
  // the first token past the vocabulary, and the last one in it
  tokens[31] = 256;
  write_shard(path, tokens);
  CHECK_THROWS_WITH(DataLoader(o), Contains("token 256") && Contains("position 31"));
  tokens[31] = 255;
  write_shard(path, tokens);
  CHECK_NOTHROW(DataLoader(o));
}

TEST_CASE("shard_smaller_than_a_global_batch_or_missing_source_is_an_error", "[data][loader]") {
  TempDir dir("small");
  // A later shard too small for one global batch is found when the loader opens, not when the
  // run reaches it.
  write_test_shards(dir, {100, 16});  // needs 2*4*2 + 1 = 17 tokens for dp=2 or grad_accum=2
  CHECK_THROWS_WITH(DataLoader(file_options(dir, 2, 4, 0, 2)),
                    Contains("shard_1.bin") && Contains("17"));
  auto accum = file_options(dir, 2, 4, 0, 1);
  accum.grad_accum = 2;
  CHECK_THROWS_WITH(DataLoader(accum), Contains("shard_1.bin") && Contains("17"));
  CHECK_NOTHROW(DataLoader(file_options(dir, 2, 4, 0, 1)));
  auto o = file_options(dir, 2, 4, 0, 1);
  o.source = dir.file("none_*.bin");
  CHECK_THROWS_WITH(DataLoader(o), Contains("no files match") && Contains(o.source));
  o.source = "synthetic:zipf";
  CHECK_THROWS_WITH(DataLoader(o), Contains("synthetic:zipf") && Contains("synthetic:markov"));
}

// A file whose name holds glob characters is read as the path it is (as a glob, "shard_[0]" would
// match "shard_0" instead, and nothing here).
TEST_CASE("a_path_with_glob_characters_in_its_name_is_read_as_it_is", "[data][loader]") {
  TempDir dir("literal");
  write_test_shards(dir, {100});
  std::filesystem::rename(dir.file("shard_0.bin"), dir.file("shard_[0].bin"));
  auto o = file_options(dir, 2, 4, 0, 1);
  o.source = dir.file("shard_[0].bin");
  DataLoader loader(o);
  CHECK(next(loader).inputs.front() == 0);
}

// Val data needs one global batch in all: evals skip a val shard smaller than that (a train
// shard that small is an error); val data with no such shard is an error that says how to train
// without evals.
TEST_CASE("val_loader_skips_shards_smaller_than_a_global_batch", "[data][loader]") {
  TempDir dir("valsmall");
  write_test_shards(dir, {10, 100});  // B*T = 8, grad_accum 2: 16 + 1 tokens a step
  auto o = file_options(dir, 2, 4, 0, 1);
  o.grad_accum = 2;
  CHECK_THROWS_WITH(DataLoader(o), Contains("shard_0.bin has 10 tokens"));
  o.is_val = true;
  DataLoader val(o);
  CHECK(val.samples_per_epoch() == 6);
  CHECK(next(val).inputs.front() == 10000);  // shard_1's first token
  TempDir tiny("valtiny");
  write_test_shards(tiny, {10});
  auto t = file_options(tiny, 2, 4, 0, 1);
  t.is_val = true;
  t.grad_accum = 2;
  CHECK_THROWS_WITH(DataLoader(t), Contains("data.val = ") && Contains("train.eval_every: 0"));
}

// A shuffled stream's position is a sample of a permutation of whole global batches: it resumes
// only with the global batch it was saved with, even where the offset happens to divide.
TEST_CASE("shuffled_restore_with_another_global_batch_is_refused", "[data][loader]") {
  TempDir dir("shufflebatch");
  write_test_shards(dir, {200});
  auto o = file_options(dir, 2, 4, 0, 1);  // 8 tokens a step
  o.shuffle = true;
  DataLoader loader(o);
  CHECK_NOTHROW(loader.restore({0, 32, 0}, 8));
  CHECK_THROWS_WITH(loader.restore({0, 32, 0}, 16),
                    Contains("saved with 16 tokens per step, this run has 8"));
  o.shuffle = false;  // an unshuffled stream reads on from the token
  DataLoader plain(o);
  CHECK_NOTHROW(plain.restore({0, 32, 0}, 16));
}

TEST_CASE("val_loader_reset_starts_again_at_the_beginning", "[data][loader]") {
  TempDir dir("reset");
  write_test_shards(dir, {100, 100});
  for (const std::string& source : {dir.file("shard_*.bin"), std::string("synthetic:markov")}) {
    auto o = file_options(dir, 2, 4, 0, 1);
    o.source = source;
    if (is_synthetic_spec(source)) o.vocab_size = 256;  // quicker to build
    o.is_val = true;
    DataLoader loader(o);
    std::vector<Batch> first;
    for (int i = 0; i < 15; ++i) first.push_back(next(loader));
    loader.reset();
    CHECK(loader.state() == LoaderState{});
    for (int i = 0; i < 15; ++i) {
      INFO(source << " batch " << i);
      require_same(next(loader), first[static_cast<size_t>(i)]);
    }
  }
}

TEST_CASE("synthetic_train_and_val_streams_differ", "[data][loader]") {
  LoaderOptions o{.source = "synthetic:markov", .micro_batch = 4, .seq_len = 16};
  DataLoader train(o);
  o.is_val = true;
  DataLoader val(o);
  const Batch a = next(train);
  const Batch b = next(val);
  CHECK(a.inputs != b.inputs);
  CHECK(train.entropy_floor() == val.entropy_floor());
}

TEST_CASE("entropy_floor_is_known_for_synthetic_sources_only", "[data][loader]") {
  TempDir dir("floor");
  write_test_shards(dir, {100});
  CHECK(std::isnan(DataLoader(file_options(dir, 2, 4, 0, 1)).entropy_floor()));
  LoaderOptions uniform{.source = "synthetic:uniform", .vocab_size = 100};
  CHECK(DataLoader(uniform).entropy_floor() == Approx(std::log(100.0)));
  LoaderOptions markov{.source = "synthetic:markov"};
  const double floor = DataLoader(markov).entropy_floor();
  CHECK(floor > 0);
  CHECK(floor < std::log(256.0));
  CHECK_THAT(DataLoader(markov).describe(), Contains("synthetic:markov") && Contains("nats"));
}
