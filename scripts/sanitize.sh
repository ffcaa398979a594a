#!/usr/bin/env bash
# Builds the tests with a sanitizer and runs them through ctest (not part of CI: an instrumented
# build of everything takes about 30 minutes on 2 cores). The cuda backend is left out (nvcc and
# the sanitizers do not mix, and its tests need a device); the kernels are checked through their
# emulation (tests/unit/kernels: the .cu sources run on the cpu, each CUDA thread a std::thread
# under a sanitizer, where other builds run them as fibers), where AddressSanitizer finds
# out-of-bounds reads and writes of global and shared memory and ThreadSanitizer finds shared
# memory used by two threads of a block without a barrier between them.
#   scripts/sanitize.sh asan [CTEST ARGS]   AddressSanitizer + UBSan; default: every unit test
#   scripts/sanitize.sh tsan [CTEST ARGS]   ThreadSanitizer; default: the emulated kernels
# SANITIZE_TARGETS="unit_dist trainer" builds only those targets (minutes, not half an hour): for
# checking one module's tests, or the trainer under scripts/fuzz_faults.py --trainer.
# A report fails the test (UBSan does not recover; ThreadSanitizer exits 66). OpenMP runs one
# thread under ThreadSanitizer: libgomp is not instrumented and its threads would report races
# that are not there; races reported inside libgloo are suppressed (scripts/tsan-gloo.supp says
# why). The largest emulated kernel tests need more than ctest's 300 s under
# ThreadSanitizer here; run those from build-tsan/tests/unit_kernels by name.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:?usage: scripts/sanitize.sh asan|tsan [ctest args]}
shift
case $kind in
  asan) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
        default=(-R '^unit\.') ;;
  tsan) flags="-fsanitize=thread"
        default=(-R '^unit\.kernels\.')
        export TSAN_OPTIONS="suppressions=$root/scripts/tsan-gloo.supp ${TSAN_OPTIONS:-}"
        export OMP_NUM_THREADS=1 ;;
  *) echo "sanitize.sh: '$kind' is not asan or tsan" >&2; exit 2 ;;
esac
build=$root/build-$kind
# -Werror off: the sanitizers make gcc 12 warn inside libstdc++ (<regex>'s maybe-uninitialized).
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINER_CUDA=OFF \
  -DTRAINER_WERROR=OFF -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
# shellcheck disable=SC2086  # a list of targets
cmake --build "$build" -j "$(nproc)" ${SANITIZE_TARGETS:+--target $SANITIZE_TARGETS}
cd "$build"
export UBSAN_OPTIONS=print_stacktrace=1
(($#)) || set -- "${default[@]}"
ctest --output-on-failure -j "$(nproc)" "$@"
