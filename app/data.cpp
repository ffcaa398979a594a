// `trainer data prepare`: tokenizes text files into llm.c token shards (runtime/data/prepare.h).
#include <iostream>
#include <memory>

#include "app/verbs.h"
#include "runtime/data/prepare.h"

namespace trainer::app {

void register_data(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Token data: prepare llm.c token shards from text.");
  data->require_subcommand(1);

  auto options = std::make_shared<data::PrepareOptions>();
  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "Tokenize text files (byte-level: each byte is a token, vocab 256) into "
      "<output>/train_NNNNNN.bin and <output>/val_NNNNNN.bin in llm.c's shard format.");
  prepare
      ->add_option("--input", options->inputs,
                   "Text files to tokenize, concatenated in the order given")
      ->required();
  prepare->add_option("--output", options->output_dir, "Directory for the shards (created)")
      ->required();
  prepare->add_option("--tokenizer", options->tokenizer, "Tokenizer: byte")->capture_default_str();
  prepare
      ->add_option("--val-fraction", options->val_fraction,
                   "Fraction of the tokens, taken from the end, written to val_*.bin; in [0, 1)")
      ->capture_default_str();
  prepare->callback([options] {
    const data::PrepareSummary summary = data::prepare_data(*options);
    std::cout << summary.describe() << std::endl;
  });
}

}  // namespace trainer::app
