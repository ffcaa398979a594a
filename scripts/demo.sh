#!/usr/bin/env bash
# Sets up (apt), builds, and trains the embedded default (configs/tiny.yaml) on 2 local ranks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh"
cd "$root"
exec "${BUILD_DIR:-$root/build}/trainer" launch --nproc-per-node "${NPROC:-2}" configs/tiny.yaml "$@"
