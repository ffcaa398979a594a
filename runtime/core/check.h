#pragma once
// Internal invariant checks. A failed check is a bug or an impossible state, never bad user input
// (bad input is reported through config::ConfigError with exit status 2).
#include <sstream>
#include <stdexcept>

namespace trainer {

struct CheckError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace trainer

#define TRAINER_CHECK(cond, msg)                                                                \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::ostringstream trainer_check_os_;                                                     \
      trainer_check_os_ << __FILE__ << ":" << __LINE__ << ": check failed: " #cond ": " << msg; \
      throw ::trainer::CheckError(trainer_check_os_.str());                                     \
    }                                                                                           \
  } while (0)
