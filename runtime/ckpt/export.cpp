#include "runtime/ckpt/export.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "runtime/config/run_config.h"
#include "runtime/core/atomic_file.h"
#include "runtime/data/shard_file.h"
#include "runtime/model/param_layout.h"

namespace trainer::ckpt {
namespace {

constexpr int32_t kLlmcMagic = 20240326;

bool hf_transposed(const std::string& name) {
  return name.find(".weight") != std::string::npos &&
         (name.find("c_attn") != std::string::npos || name.find("c_proj") != std::string::npos ||
          name.find("c_fc") != std::string::npos);
}

std::vector<float> transpose(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

// llm.c files pad wte to a multiple of 128 rows whatever the model's own padding.
int64_t llmc_padded_vocab(int64_t v) {
  return (v + 127) / 128 * 128;
}

// Files hold wte with the vocab_size real rows; the model's layout may add zero padding rows
// (model.make_vocab_size_divisible_by). Elements of a tensor as files store it:
int64_t file_numel(const model::ParamSpec& spec, const model::GptDims& d) {
  return spec.name == "wte.weight" ? int64_t{d.vocab} * d.d_model : spec.numel;
}

model::ParamLayout whole_layout(const model::GptDims& dims) {
  return model::ParamLayout(dims, model::GptShard::whole(dims));
}

// The llm.c order: each kind over all layers.
std::vector<std::string> llmc_order(const model::GptDims& d) {
  std::vector<std::string> out = {"wte.weight", "wpe.weight"};
  const char* kinds[] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                         "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                         "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                         "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  for (const char* k : kinds)
    for (int l = 0; l < d.n_layer; ++l) out.push_back("h." + std::to_string(l) + "." + k);
  out.push_back("ln_f.weight");
  out.push_back("ln_f.bias");
  return out;
}

// The llm.c header against the model, and the file's size against the header; `in` is left
// after the header.
void check_llmc(std::ifstream& in, const std::string& path, const model::GptDims& d,
                int32_t (&h)[256]) {
  if (!in.read(reinterpret_cast<char*>(h), sizeof h)) throw CheckpointError(path + ": truncated");
  if (h[1] != 3)
    throw CheckpointError(path + ": llm.c version " + std::to_string(h[1]) + ", need 3 (fp32)");
  const int want[5] = {d.seq_len, d.vocab, d.n_layer, d.n_head, d.d_model};
  const char* names[5] = {"seq_len", "vocab_size", "n_layer", "n_head", "d_model"};
  for (int i = 0; i < 5; ++i)
    if (h[2 + i] != want[i])
      throw CheckpointError(path + ": model." + names[i] + " is " + std::to_string(h[2 + i]) +
                            " in the file, " + std::to_string(want[i]) + " in the config");
  if (d.ffn_mult != 4) throw CheckpointError(path + ": llm.c files need model.ffn_mult 4");
  if (d.moe())
    throw CheckpointError(path +
                          ": llm.c files hold dense GPT-2 weights; model.moe.num_experts "
                          "must be 0 to start from one");
  const int64_t Vp = h[7];
  if (Vp < d.vocab || Vp > (int64_t{1} << 30))
    throw CheckpointError(path + ": padded vocabulary " + std::to_string(Vp) + " in the header, " +
                          "below model.vocab_size " + std::to_string(d.vocab) + " or absurd");
  int64_t floats = (Vp - d.vocab) * d.d_model;  // the file's padding rows of wte
  const auto layout = whole_layout(d);
  for (const auto& name : llmc_order(d)) floats += file_numel(layout.find(name), d);
  const int64_t implied = static_cast<int64_t>(sizeof h) + 4 * floats;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path));
  if (size != implied)
    throw CheckpointError(path + ": " + std::to_string(size) + " bytes, the header implies " +
                          std::to_string(implied));
}

GlobalWeights read_llmc(const std::string& path, const model::GptDims& d) {
  std::ifstream in(path, std::ios::binary);
  int32_t h[256] = {};
  check_llmc(in, path, d, h);
  const int64_t Vp = h[7], C = d.d_model;
  const auto layout = whole_layout(d);
  GlobalWeights w;
  for (const auto& name : llmc_order(d)) {
    std::vector<float>& t = w[name];
    const model::ParamSpec& spec = layout.find(name);
    t.assign(static_cast<size_t>(spec.numel), 0.0f);  // the model's padding rows stay zero
    const int64_t n = file_numel(spec, d);
    if (!in.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(n * 4)))
      throw CheckpointError(path + ": truncated in '" + name + "'");
    if (name == "wte.weight") in.seekg((Vp - d.vocab) * C * 4, std::ios::cur);  // file padding
  }
  return w;
}

// The blocks a safetensors file holds: 1 + the highest N of its "h.N." tensors.
int hf_layers(const SafetensorsReader& r) {
  int layers = 0;
  for (const auto& [name, info] : r.tensors()) {
    if (!name.starts_with("h.")) continue;
    int n = -1;
    const char* digits = name.c_str() + 2;
    const auto [end, ec] = std::from_chars(digits, name.c_str() + name.size(), n);
    if (ec == std::errc() && *end == '.' && n >= 0 && n < (1 << 20))
      layers = std::max(layers, n + 1);
  }
  return layers;
}

// A tensor's shape in an HF file ([in, out] for the transposed Conv1D weights, wte's unpadded).
std::vector<int64_t> hf_shape(const model::ParamSpec& spec, const model::GptDims& d) {
  std::vector<int64_t> want = spec.global_shape;
  if (spec.name == "wte.weight") want[0] = d.vocab;  // without the model's padding rows
  if (hf_transposed(spec.name) && want.size() == 2) std::swap(want[0], want[1]);
  return want;
}

// The header's tensors against the model (their data is not read).
void check_hf(const SafetensorsReader& r, const std::string& path, const model::GptDims& d) {
  // A file with more blocks than the model has its shapes right for every block the model reads:
  // it would load, its last blocks dropped.
  if (const int layers = hf_layers(r); layers != d.n_layer)
    throw CheckpointError(path + ": model.n_layer is " + std::to_string(layers) + " in the file, " +
                          std::to_string(d.n_layer) + " in the config");
  const auto layout = whole_layout(d);
  for (const auto& spec : layout.params()) {
    const std::vector<int64_t> want = hf_shape(spec, d);
    if (r.info(spec.name).shape != want)
      throw CheckpointError(path + ": '" + spec.name + "' has shape " +
                            nlohmann::json(r.info(spec.name).shape).dump() +
                            ", the config's model needs " + nlohmann::json(want).dump());
  }
}

GlobalWeights read_hf(const std::string& path, const model::GptDims& d) {
  SafetensorsReader r(path);
  check_hf(r, path, d);
  GlobalWeights w;
  const auto layout = whole_layout(d);
  for (const auto& spec : layout.params()) {
    const std::vector<int64_t> want = hf_shape(spec, d);
    std::vector<float> t(static_cast<size_t>(spec.numel), 0.0f);
    r.read_f32(spec.name, 0, file_numel(spec, d), t.data());
    if (hf_transposed(spec.name) && want.size() == 2) t = transpose(t, want[0], want[1]);
    w[spec.name] = std::move(t);
  }
  return w;
}

}  // namespace

GlobalWeights read_weights(CheckpointReader& reader) {
  GlobalWeights w;
  for (const auto& t : reader.manifest().tensors) {
    int64_t n = 1;
    for (auto s : t.global_shape) n *= s;
    std::vector<float> buf(static_cast<size_t>(n));
    reader.read_global("param", t.name, 0, n, buf.data());
    w[t.name] = std::move(buf);
  }
  return w;
}

void write_hf_safetensors(const std::string& path, const model::GptDims& dims,
                          const GlobalWeights& w) {
  std::vector<std::vector<float>> keep;
  std::vector<TensorToWrite> tensors;
  const auto layout = whole_layout(dims);
  keep.reserve(layout.params().size());
  for (const auto& spec : layout.params()) {
    std::vector<int64_t> shape = spec.global_shape;
    const std::vector<float>& src = w.at(spec.name);
    if (hf_transposed(spec.name) && shape.size() == 2) {
      keep.push_back(transpose(src, shape[0], shape[1]));
      std::swap(shape[0], shape[1]);
    } else if (spec.name == "wte.weight") {  // the vocab_size real rows only
      shape[0] = dims.vocab;
      keep.emplace_back(src.begin(), src.begin() + file_numel(spec, dims));
    } else {
      keep.push_back(src);
    }
    tensors.push_back({spec.name, "F32", shape, keep.back().data(),
                       static_cast<int64_t>(keep.back().size() * 4)});
  }
  write_safetensors(path, tensors, {{"format", "pt"}});
}

std::string llmc_export_problem(const model::GptDims& d) {
  if (d.ffn_mult != 4)
    return "llm.c export needs model.ffn_mult 4 (this model has " + std::to_string(d.ffn_mult) +
           "); export to safetensors instead";
  if (d.moe())
    return "llm.c export needs a dense model (llm.c's GPT-2 has no experts); export to "
           "safetensors instead";
  return "";
}

void write_llmc(const std::string& path, const model::GptDims& d, const GlobalWeights& w) {
  if (const std::string problem = llmc_export_problem(d); !problem.empty())
    throw CheckpointError(problem);
  int32_t h[256] = {};
  const int64_t Vp = llmc_padded_vocab(d.vocab);
  h[0] = kLlmcMagic;
  h[1] = 3;
  h[2] = d.seq_len;
  h[3] = d.vocab;
  h[4] = d.n_layer;
  h[5] = d.n_head;
  h[6] = d.d_model;
  h[7] = static_cast<int32_t>(Vp);
  AtomicFileWriter out(path);  // (its errors name the cause: a full disk, a read-only one)
  out.write(h, sizeof h);
  const auto layout = whole_layout(d);
  for (const auto& name : llmc_order(d)) {
    const auto& t = w.at(name);
    const int64_t n = file_numel(layout.find(name), d);
    out.write(t.data(), static_cast<size_t>(n) * 4);
    if (name == "wte.weight") {
      const std::vector<float> pad(static_cast<size_t>((Vp - d.vocab) * d.d_model), 0.0f);
      out.write(pad.data(), pad.size() * 4);
    }
  }
  out.commit();
}

namespace {

int32_t first_int32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("model.init_from: cannot open " + path);
  int32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), 4);
  return magic;
}

bool is_llmc(const std::string& path) {
  return first_int32(path) == kLlmcMagic;
}

}  // namespace

GlobalWeights read_weight_file(const std::string& path, const model::GptDims& dims) {
  return is_llmc(path) ? read_llmc(path, dims) : read_hf(path, dims);
}

void check_init_from(const std::string& path, const model::GptDims& dims) {
  try {
    check_weight_file(path, dims);
  } catch (const std::exception& e) {  // the file the user named is bad input
    throw config::ConfigError("config: model.init_from = \"" + path + "\": " + e.what());
  }
}

void check_weight_file(const std::string& path, const model::GptDims& dims) {
  const int32_t magic = first_int32(path);
  if (magic == data::kShardMagic)
    throw CheckpointError("an llm.c token shard (data, magic " + std::to_string(magic) +
                          "), not weights: expected an llm.c model file (magic " +
                          std::to_string(kLlmcMagic) +
                          ", as `trainer ckpt export --format llmc` writes) or a safetensors file");
  if (magic == kLlmcMagic) {
    std::ifstream in(path, std::ios::binary);
    int32_t h[256] = {};
    check_llmc(in, path, dims, h);
    return;
  }
  std::optional<SafetensorsReader> reader;
  try {
    reader.emplace(path);
  } catch (const std::exception& e) {
    throw CheckpointError(std::string("neither an llm.c model file (magic ") +
                          std::to_string(kLlmcMagic) + ") nor a safetensors file (" + e.what() +
                          ")");
  }
  check_hf(*reader, path, dims);
}

void fill_owned_params(const model::ParamLayout& layout, const GlobalWeights& w,
                       const OwnedShard& owned) {
  for (const auto& p : pieces_of_range(layout, owned.begin, owned.end)) {
    const auto& spec = layout.find(p.tensor);
    const std::vector<float>& src = w.at(p.tensor);
    std::vector<float> local(static_cast<size_t>(spec.numel));
    model::extract_local(spec, src.data(), local.data());
    std::memcpy(owned.params + spec.offset + p.a - owned.begin, local.data() + p.a,
                static_cast<size_t>(p.b - p.a) * 4);
  }
}

}  // namespace trainer::ckpt
