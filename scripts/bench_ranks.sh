# Sourced by the layout benchmarks (bench_tp.sh, bench_pp.sh), after they set root, build, out and
# the array common (the model and run options every layout shares).
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
