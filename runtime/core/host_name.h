#pragma once
// This machine's host name (gethostname), for messages and for telling nodes apart.
#include <unistd.h>

#include <string>

namespace trainer {

inline std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace trainer
