# Each rank's output comes back line by line with "[rank N] " in front, and the train arguments
# after RUN.yaml reach every rank verbatim (here --help, whose text is compared with one process).
source "$2/tests/lib/common.sh"
cp "$src/configs/tiny.yaml" run.yaml
"$bin" train run.yaml --help >single.txt 2>&1
"$bin" launch --nproc-per-node 3 run.yaml --help >launch.txt 2>&1 || { cat launch.txt; fail "launch failed"; }
for r in 0 1 2; do
  sed -n "s/^\[rank $r\] //p" launch.txt >rank$r.txt
  diff single.txt rank$r.txt >/dev/null || { diff single.txt rank$r.txt; fail "rank $r output differs"; }
done
others=$(grep -cv '^\[rank [0-2]\] ' launch.txt || true)
[ "$others" = 0 ] || { cat launch.txt; fail "$others lines without a rank prefix"; }
echo "ok: 3 ranks x $(wc -l <single.txt) lines, each prefixed"
