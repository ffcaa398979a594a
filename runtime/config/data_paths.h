#pragma once
// The files a data path (data.train, data.val) names, for the validation and the loaders alike.
#include <string>
#include <vector>

namespace trainer::config {

// The path itself where it exists, even with glob characters in its name ("run[1]/train.bin");
// otherwise what it matches as a glob, sorted by name (glob(3)'s order). Empty: none.
std::vector<std::string> data_paths(const std::string& spec);

// The files both specs name (by their canonical paths), in `val`'s order: a val set that is part
// of the train set measures the model on what it trains on. Empty for synthetic specs.
std::vector<std::string> shared_data_files(const std::string& train, const std::string& val);

}  // namespace trainer::config
