#include "runtime/ckpt/checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "runtime/core/atomic_file.h"
#include "runtime/core/sha256.h"

namespace fs = std::filesystem;

namespace trainer::ckpt {
namespace {

std::string rank_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return buf;
}

void barrier(dist::Comm* world) {
  if (world != nullptr && world->size() > 1) world->barrier();
}

// The pieces a rank saves of its runs, in order.
std::vector<Piece> saved_pieces_of_runs(const model::ParamLayout& layout,
                                        const std::vector<std::pair<int64_t, int64_t>>& runs,
                                        int zero) {
  std::vector<Piece> out;
  for (const auto& [begin, end] : runs) {
    std::vector<Piece> p = saved_pieces(layout, begin, end, zero);
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> ranges_of(const OwnedRuns& owned) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const OwnedShard& r : owned) out.emplace_back(r.begin, r.end);
  return out;
}

// Every rank's ShardFile on rank 0 (pieces are recomputed from the owned runs and the layers
// each rank holds).
std::vector<ShardFile> gather_shards(const SaveRequest& req, const ShardFile& mine) {
  if (req.world == nullptr || req.world->size() == 1) return {mine};
  const int n = req.world->size();
  std::vector<uint8_t> hashes(64 * static_cast<size_t>(n));
  req.world->all_gather(mine.sha256.data(), hashes.data(), 64, dist::CommDType::u8);
  const model::GptShard& shard = req.layout->shard();
  constexpr size_t kInfo = 8;
  const int64_t runs = static_cast<int64_t>(req.owned.size());
  int64_t info[kInfo] = {mine.bytes,   shard.tp_rank,      shard.first_layer, shard.num_layers,
                         shard.chunks, shard.chunk_stride, shard.ep_rank,     runs};
  std::vector<int64_t> infos(kInfo * static_cast<size_t>(n));
  req.world->all_gather(info, infos.data(), kInfo, dist::CommDType::i64);
  // the owned runs, [begin, end) pairs padded to the most any rank has
  int64_t most = 0;
  for (int r = 0; r < n; ++r) most = std::max(most, infos[kInfo * static_cast<size_t>(r) + 7]);
  const size_t width = 2 * static_cast<size_t>(most);
  std::vector<int64_t> my_ranges(width, 0), all_ranges(width * static_cast<size_t>(n));
  for (size_t i = 0; i < req.owned.size(); ++i) {
    my_ranges[2 * i] = req.owned[i].begin;
    my_ranges[2 * i + 1] = req.owned[i].end;
  }
  if (width > 0)
    req.world->all_gather(my_ranges.data(), all_ranges.data(), width, dist::CommDType::i64);
  std::vector<ShardFile> out;
  for (int r = 0; r < n; ++r) {
    const size_t i = static_cast<size_t>(r);
    const int64_t* theirs_info = infos.data() + kInfo * i;
    // That rank's layout: this one's, but for its own tp slice and pipeline stage.
    const model::GptDims& d = req.layout->dims();
    model::GptShard theirs = shard;
    theirs.tp_rank = static_cast<int>(theirs_info[1]);
    theirs.first_layer = static_cast<int>(theirs_info[2]);
    theirs.num_layers = static_cast<int>(theirs_info[3]);
    theirs.chunks = static_cast<int>(theirs_info[4]);
    theirs.chunk_stride = static_cast<int>(theirs_info[5]);
    theirs.ep_rank = static_cast<int>(theirs_info[6]);
    theirs.has_embedding = theirs.first_layer == 0;
    theirs.has_head = theirs.last_global_layer() == d.n_layer - 1;
    const model::ParamLayout layout(d, theirs);
    std::vector<std::pair<int64_t, int64_t>> theirs_runs;
    for (int64_t k = 0; k < theirs_info[7]; ++k)
      theirs_runs.emplace_back(all_ranges[width * i + 2 * static_cast<size_t>(k)],
                               all_ranges[width * i + 2 * static_cast<size_t>(k) + 1]);
    ShardFile f{r, rank_file_name(r),
                std::string(hashes.begin() + 64 * static_cast<long>(i),
                            hashes.begin() + 64 * static_cast<long>(i + 1)),
                theirs_info[0], saved_pieces_of_runs(layout, theirs_runs, req.manifest.grid.zero)};
    out.push_back(std::move(f));
  }
  return out;
}

// After a commit: a checkpoint that cannot be removed (a permission, a busy file) costs disk, not
// the run, whose new checkpoint is saved; so it is a warning. The manifest goes first, so that a
// removal that fails partway leaves a directory no resume takes for a checkpoint.
void prune(const std::string& root, int keep) {
  if (keep <= 0) return;
  std::vector<std::string> all;
  try {
    all = list_checkpoints(root);
  } catch (const fs::filesystem_error& e) {
    spdlog::warn("checkpoint.keep = {}: cannot list {} to prune it ({}); older checkpoints stay",
                 keep, root, e.what());
    return;
  }
  for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) {
    std::error_code ec;
    if (!fs::remove(all[i] + "/" + kManifestName, ec) || ec) {
      spdlog::warn("checkpoint.keep = {}: cannot remove the older checkpoint {} ({}); it stays",
                   keep, all[i], ec ? ec.message() : "its manifest.json is gone");
      continue;
    }
    fs::remove_all(all[i], ec);
    if (ec)
      spdlog::warn(
          "checkpoint.keep = {}: {} is not a checkpoint any more (its manifest.json is "
          "removed), but the rest of it cannot be removed: {}",
          keep, all[i], ec.message());
  }
}

// Every rank's file in `tmp_dir` as rank 0 sees it, at the size its rank wrote. A rank whose
// checkpoint.dir is not the directory rank 0 sees (a node-local path, another mount) wrote
// elsewhere: a manifest listing its file would be a checkpoint reported saved that no resume can
// load.
void check_every_file_is_here(const std::string& tmp_dir, const std::vector<ShardFile>& shards) {
  std::error_code missing;
  if (!fs::is_directory(tmp_dir, missing))  // (not a view of another filesystem: gone here too)
    throw CheckpointError("checkpoint not committed: " + tmp_dir +
                          " was removed or renamed while its files were written (checkpoint.dir "
                          "removed or moved during the run?)");
  for (const ShardFile& f : shards) {
    std::error_code ec;
    const auto size = fs::file_size(tmp_dir + "/" + f.file, ec);
    if (!ec && static_cast<int64_t>(size) == f.bytes) continue;
    throw CheckpointError(
        "checkpoint not committed: rank " + std::to_string(f.rank) + " wrote " + f.file + " (" +
        std::to_string(f.bytes) + " bytes), but rank 0 finds " +
        (ec ? std::string("no such file") : std::to_string(size) + " bytes") + " in " + tmp_dir +
        ": every rank must see the same checkpoint.dir (a filesystem all nodes share)");
  }
}

}  // namespace

namespace {

// What is wrong with a committed checkpoint's file `f` short of its checksum: "" where it is
// there at the size the manifest lists.
std::string file_size_problem(const std::string& step_dir, const ShardFile& f) {
  std::error_code ec;
  const auto size = fs::file_size(step_dir + "/" + f.file, ec);
  if (ec) return "missing (listed in the manifest)";
  if (static_cast<int64_t>(size) != f.bytes)
    return std::to_string(size) + " bytes, manifest says " + std::to_string(f.bytes) +
           " (truncated or replaced)";
  return "";
}

}  // namespace

bool files_look_complete(const std::string& step_dir) {
  try {
    const Manifest m = read_manifest(step_dir);
    return std::all_of(m.shards.begin(), m.shards.end(),
                       [&](const ShardFile& f) { return file_size_problem(step_dir, f).empty(); });
  } catch (const std::exception&) {
    return false;
  }
}

ShardFile write_shard_file(const std::string& tmp_dir, int rank, const model::ParamLayout& layout,
                           const OwnedRuns& owned, const Manifest& manifest) {
  ShardFile f{rank, rank_file_name(rank), "", 0,
              saved_pieces_of_runs(layout, ranges_of(owned), manifest.grid.zero)};
  std::vector<TensorToWrite> tensors;
  for (int k = 0; k < 3; ++k)
    for (const auto& p : f.pieces) {
      const int64_t flat = layout.find(p.tensor).offset + p.a;
      const auto run = std::find_if(owned.begin(), owned.end(), [&](const OwnedShard& r) {
        return flat >= r.begin && flat < r.end;
      });
      const float* base[3] = {run->params, run->m, run->v};
      tensors.push_back({std::string(kKinds[k]) + "/" + p.tensor,
                         "F32",
                         {p.b - p.a},
                         base[k] + flat - run->begin,
                         (p.b - p.a) * 4});
    }
  std::string ranges;
  for (const OwnedShard& r : owned)
    ranges += (ranges.empty() ? "" : ";") + std::to_string(r.begin) + "," + std::to_string(r.end);
  const auto& l = manifest.loader;
  const std::map<std::string, std::string> meta = {
      {"step", std::to_string(manifest.step)},
      {"rank", std::to_string(rank)},
      {"owned_range", ranges},
      {"loader",
       std::to_string(l.shard) + "," + std::to_string(l.offset) + "," + std::to_string(l.epoch)},
      {"seed", std::to_string(manifest.seed)}};
  const std::string path = tmp_dir + "/" + f.file;
  f.sha256 = write_safetensors(path, tensors, meta);
  f.bytes = static_cast<int64_t>(fs::file_size(path));
  return f;
}

std::string commit_checkpoint(const std::string& root, Manifest m, const model::ParamLayout& layout,
                              std::vector<ShardFile> shards, int keep) {
  const std::string final_dir = root + "/" + step_dir_name(m.step);
  const std::string tmp_dir = final_dir + ".tmp";
  check_every_file_is_here(tmp_dir, shards);
  m.shards = std::move(shards);
  m.tensors.clear();  // every tensor of the model, whatever part of it this rank holds
  const model::ParamLayout whole(layout.dims(), model::GptShard::whole(layout.dims()));
  for (const auto& p : whole.params()) m.tensors.push_back({p.name, p.global_shape});
  write_file_atomic(tmp_dir + "/" + kManifestName, to_json(m).dump(1));
  fsync_dir(tmp_dir);
  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  fsync_dir(root);
  prune(root, keep);
  return final_dir;
}

std::string begin_checkpoint(const std::string& root, int64_t step) {
  const std::string tmp_dir = root + "/" + step_dir_name(step) + ".tmp";
  // `root` is not created here: its lock's holder made it (RunDirLock), and one removed since
  // must fail the save (ENOENT), not come back without the lock.
  fs::remove_all(tmp_dir);
  fs::create_directory(tmp_dir);
  return tmp_dir;
}

int64_t step_of_dir_name(const std::string& name) {
  if (name.size() < 13 || name.size() > 23 || !name.starts_with("step_")) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

void test_delay(int rank, bool before_write) {
  const char* spec = std::getenv("TRAINER_TEST_CKPT_DELAY_S");
  if (!spec) return;
  const std::string s = spec;
  const size_t at = s.find("rank=");
  if (at != std::string::npos && std::atoi(s.c_str() + at + 5) != rank) return;
  if ((s.find("before_write") != std::string::npos) != before_write) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(s.c_str())));
}

std::string prepare_save(const SaveRequest& req) {
  if (req.rank == 0) begin_checkpoint(req.root, req.manifest.step);
  barrier(req.world);
  return req.root + "/" + step_dir_name(req.manifest.step) + ".tmp";
}

std::string finish_save(const SaveRequest& req, const ShardFile& mine) {
  const std::vector<ShardFile> shards = gather_shards(req, mine);  // all files are written
  std::string final_dir = req.root + "/" + step_dir_name(req.manifest.step);
  if (req.rank == 0) commit_checkpoint(req.root, req.manifest, *req.layout, shards, req.keep);
  barrier(req.world);
  return final_dir;
}

std::string save_checkpoint(const SaveRequest& req) {
  const std::string tmp_dir = prepare_save(req);
  test_delay(req.rank, /*before_write=*/true);
  const ShardFile mine = write_shard_file(tmp_dir, req.rank, *req.layout, req.owned, req.manifest);
  test_delay(req.rank, /*before_write=*/false);
  return finish_save(req, mine);
}

namespace {

// The step of a checkpoint directory's path, complete or .tmp (-1 for any other name).
int64_t step_of_path(const std::string& dir) {
  const std::string name = fs::path(dir).filename().string();
  return step_of_dir_name(name.ends_with(".tmp") ? name.substr(0, name.size() - 4) : name);
}

void sort_newest_first(std::vector<std::string>& dirs) {
  std::sort(dirs.begin(), dirs.end(), [](const std::string& a, const std::string& b) {
    return step_of_path(a) > step_of_path(b);
  });
}

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& root,
                                          std::vector<std::string>* incomplete) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    // Only names this writer makes: step_ and 8 digits, with .tmp while incomplete (a user's
    // copy such as step_00000020.bak is neither).
    const bool tmp = name.ends_with(".tmp");
    const std::string base = name.substr(0, tmp ? name.size() - 4 : name.size());
    std::error_code not_dir;  // (a symlink loop or a dangling link is not a checkpoint)
    if (!e.is_directory(not_dir) || step_of_dir_name(base) < 0) continue;
    // A directory without a manifest is never loaded (DESIGN.md): the writer commits the
    // manifest last, so only damage from outside leaves one.
    if (tmp || !fs::exists(e.path() / kManifestName, ec)) {
      if (incomplete) incomplete->push_back(e.path().string());
      continue;
    }
    out.push_back(e.path().string());
  }
  sort_newest_first(out);
  if (incomplete) sort_newest_first(*incomplete);
  return out;
}

std::string resolve_step_dir(const std::string& path, std::vector<std::string>* skipped_newer) {
  if (fs::exists(path + "/" + kManifestName)) return path;
  std::vector<std::string> incomplete;
  const auto all = list_checkpoints(path, &incomplete);
  if (all.empty()) {
    if (incomplete.empty())
      throw CheckpointError(path + ": no checkpoint (no manifest.json, no step_* dirs)");
    throw CheckpointError(path + ": no complete checkpoint: " + incomplete.front() +
                          (incomplete.size() > 1
                               ? " (and " + std::to_string(incomplete.size() - 1) + " more)"
                               : std::string()) +
                          " has no manifest.json (an incomplete write or a damaged checkpoint)");
  }
  if (skipped_newer)
    for (const std::string& dir : incomplete)
      if (step_of_path(dir) > step_of_path(all.front())) skipped_newer->push_back(dir);
  return all.front();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t;
  for (int64_t d : shape) t += (t.empty() ? "" : "x") + std::to_string(d);
  return t;
}

namespace {

// The manifest's parts must agree with each other: a hand-edited or damaged one whose files
// still pass their checksums would otherwise fail later with a bare map::at or bad_alloc.
void check_consistent(const std::string& step_dir, const Manifest& m) {
  auto bad = [&](const std::string& what) {
    throw CheckpointError(step_dir + "/manifest.json: " + what);
  };
  // The numbers a checkpoint this runtime wrote has: a hand-edited or damaged one is refused
  // here, not half loaded.
  const int64_t named = step_of_dir_name(fs::path(step_dir).filename().string());
  if (m.step < 0 || (named >= 0 && m.step != named))
    bad("step " + std::to_string(m.step) + " is not the directory's (" +
        fs::path(step_dir).filename().string() + ")");
  if (m.tokens < 0 || m.adam_step < 0)
    bad("tokens " + std::to_string(m.tokens) + " and adam_step " + std::to_string(m.adam_step) +
        " must be >= 0");
  const Grid& g = m.grid;
  if (g.dp < 1 || g.tp < 1 || g.pp < 1 || g.cp < 1 || g.ep < 1 || g.zero < 0 || g.zero > 3 ||
      int64_t{g.dp} * g.tp * g.pp * g.cp != g.world)
    bad("grid " + g.describe() + " is not a layout (world = dp x tp x pp x cp, each >= 1)");
  if (m.loader.shard < 0 || m.loader.offset < 0 || m.loader.epoch < 0)
    bad("the loader's position (shard " + std::to_string(m.loader.shard) + ", offset " +
        std::to_string(m.loader.offset) + ", epoch " + std::to_string(m.loader.epoch) +
        ") is negative");
  const model::GptDims& d = m.model;
  if (d.vocab < 1 || d.seq_len < 1 || d.n_layer < 1 || d.n_layer > 100000 || d.d_model < 1 ||
      d.n_head < 1 || d.d_model % d.n_head != 0 || d.ffn_mult < 1 || d.vocab_multiple < 1 ||
      d.num_experts < 0 || (d.moe() && (d.top_k < 1 || d.top_k > d.num_experts)))
    bad("the model's sizes are not a model (n_layer " + std::to_string(d.n_layer) + ", d_model " +
        std::to_string(d.d_model) + ", n_head " + std::to_string(d.n_head) + ")");
  const model::ParamLayout layout(d, model::GptShard::whole(d));
  if (m.tensors.size() != layout.params().size())
    bad("lists " + std::to_string(m.tensors.size()) + " tensors; its model has " +
        std::to_string(layout.params().size()));
  std::map<std::string, int64_t> numel;
  for (const TensorEntry& t : m.tensors) {
    int64_t n = 1;
    for (int64_t dim : t.global_shape) n *= dim;
    numel[t.name] = n;
  }
  for (const model::ParamSpec& p : layout.params()) {
    const auto it = std::find_if(m.tensors.begin(), m.tensors.end(),
                                 [&](const TensorEntry& t) { return t.name == p.name; });
    if (it == m.tensors.end()) bad("its model's tensor " + p.name + " is not listed");
    if (it->global_shape != p.global_shape)
      bad("tensor " + p.name + " has shape [" + shape_text(it->global_shape) +
          "]; its model gives [" + shape_text(p.global_shape) + "]");
  }
  for (const ShardFile& f : m.shards)
    for (const Piece& piece : f.pieces) {
      const auto it = numel.find(piece.tensor);
      if (it == numel.end()) bad(f.file + " lists a piece of unknown tensor " + piece.tensor);
      if (piece.a < 0 || piece.b <= piece.a || piece.b > it->second)
        bad(f.file + " lists elements [" + std::to_string(piece.a) + ", " +
            std::to_string(piece.b) + ") of " + piece.tensor + ", which has " +
            std::to_string(it->second));
    }
}

}  // namespace

Manifest verify_checkpoint(const std::string& step_dir) {
  Manifest m = read_manifest(step_dir);
  check_consistent(step_dir, m);
  for (const auto& s : m.shards) {
    const std::string path = step_dir + "/" + s.file;
    if (const std::string problem = file_size_problem(step_dir, s); !problem.empty())
      throw CheckpointError(path + ": " + problem);
    const std::string got = sha256_file(path);
    if (got != s.sha256)
      throw CheckpointError(path + ": sha256 " + got + " does not match the manifest's " +
                            s.sha256 + " (corrupted)");
  }
  return m;
}

CheckpointReader::CheckpointReader(std::string step_dir)
    : dir_(std::move(step_dir)), manifest_(read_manifest(dir_)) {
  files_.resize(manifest_.shards.size());
}

SafetensorsReader& CheckpointReader::file(size_t shard) {
  if (!files_[shard])
    files_[shard] = std::make_unique<SafetensorsReader>(dir_ + "/" + manifest_.shards[shard].file);
  return *files_[shard];
}

const std::vector<int64_t>& CheckpointReader::global_shape(const std::string& tensor) const {
  for (const auto& t : manifest_.tensors)
    if (t.name == tensor) return t.global_shape;
  throw CheckpointError(dir_ + ": no tensor '" + tensor + "' in the manifest");
}

void CheckpointReader::read_global(const std::string& kind, const std::string& tensor,
                                   int64_t first, int64_t count, float* out) {
  const auto& shape = global_shape(tensor);
  const int64_t last = first + count;
  int64_t covered = 0;
  for (size_t s = 0; s < manifest_.shards.size(); ++s)
    for (const auto& p : manifest_.shards[s].pieces) {
      if (p.tensor != tensor) continue;
      // The piece holds elements [a, b) of a rank's slice of the tensor (tp): each contiguous run
      // of that slice sits at its own place in the global tensor.
      model::for_each_slice_run(
          shape, p.split_dim, p.tp_ranges, [&](int64_t global, int64_t local, int64_t n) {
            const int64_t l_lo = std::max(local, p.a), l_hi = std::min(local + n, p.b);
            if (l_lo >= l_hi) return;
            const int64_t g_lo = std::max(first, global + (l_lo - local)),
                          g_hi = std::min(last, global + (l_hi - local));
            if (g_lo >= g_hi) return;
            const int64_t in_piece = local + (g_lo - global) - p.a;
            file(s).read_f32(kind + "/" + tensor, in_piece, g_hi - g_lo, out + (g_lo - first));
            covered += g_hi - g_lo;
          });
    }
  if (covered != count)
    throw CheckpointError(dir_ + ": elements of '" + tensor + "' missing from every shard (" +
                          std::to_string(covered) + " of " + std::to_string(count) + " found)");
}

void CheckpointReader::read_owned(const model::ParamLayout& layout, const OwnedShard& owned) {
  float* base[3] = {owned.params, owned.m, owned.v};
  for (const auto& p : pieces_of_range(layout, owned.begin, owned.end)) {
    const auto& spec = layout.find(p.tensor);
    // This layout's slice of the tensor (tp) in runs of the global tensor, whatever slices the
    // saving grid had.
    model::for_each_slice_run(spec.global_shape, spec.split_dim, spec.local_ranges,
                              [&](int64_t global, int64_t local, int64_t n) {
                                const int64_t lo = std::max(local, p.a),
                                              hi = std::min(local + n, p.b);
                                if (lo >= hi) return;
                                for (int k = 0; k < 3; ++k)
                                  read_global(kKinds[k], p.tensor, global + (lo - local), hi - lo,
                                              base[k] + spec.offset + lo - owned.begin);
                              });
  }
}

}  // namespace trainer::ckpt
