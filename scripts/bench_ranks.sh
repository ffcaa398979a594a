# Sourced by the layout benchmarks (bench_tp.sh, bench_pp.sh) with their arguments [NPROC]
# [STEPS]: sets root, build, n (NPROC, default 2, dividing 8), steps (default 20), precision
# (PRECISION, default fp32) and out (a temporary directory, removed at exit), and builds trainer.
# run then reads the array common (the model and run options every layout shares) that the
# benchmark sets.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
n=${1:-2}
steps=${2:-20}
precision=${PRECISION:-fp32}
[[ $n =~ ^[0-9]+$ ]] && (( n >= 1 && 8 % n == 0 )) || { echo "NPROC $n must divide 8" >&2; exit 2; }
cmake --build "$build" --target trainer -j "$(nproc)" >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# threads RANKS: the cores split evenly over RANKS processes (at least one each)
threads() { echo $(( $(nproc) / $1 > 0 ? $(nproc) / $1 : 1 )); }
# run NAME RANKS [args]: trains tiny.yaml with `common` and args as RANKS processes (one: train;
# more: launch), OMP/OpenBLAS threads = the cores over the ranks; the report in $out/NAME
run() {
  local name=$1 ranks=$2
  shift 2
  local t
  t=$(threads "$ranks")
  if [[ $ranks == 1 ]]; then
    OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$build/trainer" train "$root/configs/tiny.yaml" \
      "${common[@]}" "$@" --out "$out/$name" >"$out/$name.log" 2>&1
  else
    OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$build/trainer" launch --nproc-per-node "$ranks" \
      "$root/configs/tiny.yaml" "${common[@]}" "$@" --out "$out/$name" >"$out/$name.log" 2>&1
  fi || { cat "$out/$name.log"; exit 1; }
}
