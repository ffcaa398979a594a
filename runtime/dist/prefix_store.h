#pragma once
// PrefixStore: a namespace "<prefix>/" inside another store (one per communicator). base() lets
// failure reporting reach the unprefixed root store, where "failed/<rank>" keys live.
#include "runtime/dist/store.h"

namespace trainer::dist {

class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix) + "/") {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    base_->set(prefix_ + key, value);
  }
  std::vector<uint8_t> get(const std::string& key) override { return base_->get(prefix_ + key); }
  int64_t add(const std::string& key, int64_t delta) override {
    return base_->add(prefix_ + key, delta);
  }
  void wait(const std::vector<std::string>& keys) override { base_->wait(prefixed(keys)); }
  bool check(const std::vector<std::string>& keys) override { return base_->check(prefixed(keys)); }
  std::vector<MaybeValue> get_existing(const std::vector<std::string>& keys) override {
    return base_->get_existing(prefixed(keys));
  }
  std::vector<bool> which_exist(const std::vector<std::string>& keys) override {
    return base_->which_exist(prefixed(keys));
  }
  void set_timeout(std::chrono::milliseconds t) override { base_->set_timeout(t); }
  std::chrono::milliseconds timeout() const override { return base_->timeout(); }

  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(prefix_ + k);
    return out;
  }

  std::shared_ptr<Store> base_;
  std::string prefix_;
};

// The store under any number of PrefixStore layers.
std::shared_ptr<Store> root_store(std::shared_ptr<Store> store);

}  // namespace trainer::dist
