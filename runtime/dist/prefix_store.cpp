#include "runtime/dist/prefix_store.h"

namespace trainer::dist {

std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> base, const std::string& prefix) {
  return std::make_shared<PrefixStore>(std::move(base), prefix);
}

std::shared_ptr<Store> root_store(std::shared_ptr<Store> store) {
  while (auto* p = dynamic_cast<PrefixStore*>(store.get())) store = p->base();
  return store;
}

}  // namespace trainer::dist
