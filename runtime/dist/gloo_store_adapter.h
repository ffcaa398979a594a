#pragma once
// Lets gloo's rendezvous (connectFullMesh) exchange addresses through our Store, under "gloo/".
// Our store's timeout applies to every get/wait, so a rank that never arrives gives StoreTimeout.
#include <gloo/rendezvous/store.h>

#include <memory>

#include "runtime/dist/store.h"

namespace trainer::dist {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(kPrefix + key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->get(kPrefix + key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(prefixed(keys)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    store_->wait(prefixed(keys));
  }

  static constexpr const char* kPrefix = "gloo/";

 private:
  static std::vector<std::string> prefixed(const std::vector<std::string>& keys) {
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(kPrefix + k);
    return out;
  }
  std::shared_ptr<dist::Store> store_;
};

}  // namespace trainer::dist
