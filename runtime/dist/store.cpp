#include "runtime/dist/store.h"

namespace trainer::dist {

std::vector<MaybeValue> Store::get_existing(const std::vector<std::string>& keys) {
  std::vector<MaybeValue> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(check({k}) ? MaybeValue(get(k)) : std::nullopt);
  return out;
}

std::vector<bool> Store::which_exist(const std::vector<std::string>& keys) {
  std::vector<bool> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(check({k}));
  return out;
}

}  // namespace trainer::dist
