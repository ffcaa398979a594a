#!/usr/bin/env bash
# Installs the Debian packages trainer needs to build and test (skips apt when all are present).
# slurm-wlm and python3-torch are for tests only: a real srun and torchrun launch the ranks, and a
# float64 PyTorch GPT-2 checks the training math (about 45 s more of apt on a bare machine).
set -euo pipefail
pkgs=(build-essential cmake git pkg-config libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
      nlohmann-json3-dev catch2 libopenblas-dev libopenblas0-openmp libgloo-dev python3 procps
      slurm-wlm python3-torch)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
