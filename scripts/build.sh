#!/usr/bin/env bash
# Configures and builds trainer into build/ (BUILD_DIR overrides). Extra args go to cmake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} -DTRAINER_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
