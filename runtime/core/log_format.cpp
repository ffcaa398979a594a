#include "runtime/core/log_format.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string_view>

namespace trainer {
namespace {

// %*: the level's tag, none for info.
class LevelTag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string_view tag;
    switch (msg.level) {
      case spdlog::level::info:
        break;
      case spdlog::level::warn:
        tag = "warning: ";
        break;
      case spdlog::level::err:
      case spdlog::level::critical:
        tag = "error: ";
        break;
      default:
        tag = "debug: ";
        break;  // debug, trace
    }
    dest.append(tag.data(), tag.data() + tag.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<LevelTag>();
  }
};

}  // namespace

void use_run_log_format() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<LevelTag>('*').set_pattern("[%H:%M:%S] %*%v");
  spdlog::set_formatter(std::move(formatter));
}

}  // namespace trainer
