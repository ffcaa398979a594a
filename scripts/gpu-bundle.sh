#!/usr/bin/env bash
# gpu-bundle.sh: builds, on this (Debian) machine, what scripts/gpu-check.sh runs on a GPU machine
# that has CUDA but none of the project's Debian libraries (yaml-cpp, spdlog, Gloo, OpenBLAS, ...):
# a Release build for sm_90 (or CUDA_ARCH), the binaries stripped, and every shared library they
# need that is neither glibc, libstdc++/libgcc (the GPU machine's newer ones serve) nor CUDA's own
# (cudart, cuBLASLt, NCCL and the driver come from the GPU machine) copied beside them.
#   scripts/gpu-bundle.sh [BUNDLE_DIR]        (default build-gpu-bundle; it is git-ignored)
# then, on the GPU machine:  scripts/gpu-check.sh --bundle BUNDLE_DIR
# BUNDLE_DIR holds bundle.tar.gz (bin/, lib/, BUILD; gzip keeps it within the device tool's carry
# limit: each binary links the kernels, and OpenBLAS alone is 35 MiB) and a copy of BUILD;
# gpu-check.sh unpacks it. The unpacked tree is $BUILD_DIR/bundle.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
bundle="${1:-$src/build-gpu-bundle}"
build="${BUILD_DIR:-$src/build-gpu-release}"
arch="${CUDA_ARCH:-90}"
limit_mib="${LIMIT_MIB:-60}"

cmake -S "$src" -B "$build" -DTRAINER_CUDA=ON -DTRAINER_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
cmake --build "$build" -j"$(nproc)" --target trainer unit_cuda cuda_ops_bench

packed="$bundle"
bundle="$build/bundle"  # assembled and checked here, then packed into $packed
rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib"
cp "$build/trainer" "$build/tests/unit_cuda" "$build/tests/cuda_ops_bench" "$bundle/bin/"
strip "$bundle"/bin/*

# Libraries the GPU machine supplies: glibc, the compiler runtime, CUDA's and the driver's.
provided='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia)[.-]'
for binary in "$bundle"/bin/*; do
  ldd "$binary" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $provided ]]; then continue; fi
  cp -L "$path" "$bundle/lib/$name"
done
strip --strip-unneeded "$bundle"/lib/* 2>/dev/null || true
echo "arch=sm_$arch built=$(date -u +%FT%TZ) commit=$(git -C "$src" describe --always --dirty)" >"$bundle/BUILD"

# Every library the binaries need must now resolve from the bundle or be one the GPU machine has.
missing=$(for binary in "$bundle"/bin/*; do
  LD_LIBRARY_PATH="$bundle/lib" ldd "$binary" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $provided ]] || [[ "$path" == "$bundle"/lib/* ]] || echo "$name ($path)"
done)
[ -z "$missing" ] || { echo "gpu-bundle: not bundled: $missing" >&2; exit 1; }

rm -rf "$packed" && mkdir -p "$packed"
tar -C "$bundle" -czf "$packed/bundle.tar.gz" .
cp "$bundle/BUILD" "$packed/BUILD"
echo "gpu-bundle: $bundle, $(($(du -sb "$bundle" | cut -f1) / 1048576)) MiB unpacked:"
du -ab "$bundle"/bin/* "$bundle"/lib/* | sort -rn | awk '{printf "  %6.1f MiB  %s\n", $1 / 1048576, $2}'
size_mib=$(($(du -sb "$packed" | cut -f1) / 1048576))
echo "gpu-bundle: $packed/bundle.tar.gz, ${size_mib} MiB"
if [ "$size_mib" -gt "$limit_mib" ]; then
  echo "gpu-bundle: ${size_mib} MiB is over the ${limit_mib} MiB the device tool carries" >&2
  exit 1
fi
echo "gpu-bundle: ok"
