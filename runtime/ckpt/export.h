#pragma once
// Whole-model weight files, for other tools and for `model.init_from`:
//  - Hugging Face GPT-2 safetensors: "wte.weight", "h.0.attn.c_attn.weight", ... ; HF's Conv1D
//    stores c_attn/c_proj/c_fc weights as [in, out], ours are [out, in], so those are transposed.
//  - llm.c's model file: 256 int32 header (magic 20240326, version 3 = fp32, maxT, V, L, NH, C,
//    padded V), then every parameter kind over all layers, weights [out, in], wte padded to Vp
//    rows.
#include <map>
#include <string>
#include <vector>

#include "runtime/ckpt/checkpoint.h"
#include "runtime/model/gpt_shape.h"

namespace trainer::ckpt {

// Global tensors by our names (ParamLayout of the whole model), [out, in] weights.
using GlobalWeights = std::map<std::string, std::vector<float>>;

// Why this model has no llm.c file ("" when it has one): llm.c's GPT-2 is dense, MLP width 4C.
std::string llmc_export_problem(const model::GptDims& d);

GlobalWeights read_weights(CheckpointReader& reader);
void write_hf_safetensors(const std::string& path, const model::GptDims& dims,
                          const GlobalWeights& w);
void write_llmc(const std::string& path, const model::GptDims& dims, const GlobalWeights& w);

// Reads either format (told apart by the llm.c magic); checks its shapes against `dims` and
// throws CheckpointError naming the first mismatch.
GlobalWeights read_weight_file(const std::string& path, const model::GptDims& dims);
// The same checks from the file's header alone (its shapes; an llm.c file's size too).
void check_weight_file(const std::string& path, const model::GptDims& dims);
// model.init_from's file against the config's model by check_weight_file: a config::ConfigError
// naming the key, before a run reads data or allocates (and in trainer plan).
void check_init_from(const std::string& path, const model::GptDims& dims);

// Copies the owned part of whole-model weights into `owned.params` (layout of tp 1).
void fill_owned_params(const model::ParamLayout& layout, const GlobalWeights& w,
                       const OwnedShard& owned);

}  // namespace trainer::ckpt
