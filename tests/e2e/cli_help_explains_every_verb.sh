# `trainer --help` lists every verb; each verb's --help explains its options.
source "$2/tests/lib/common.sh"
"$bin" --help > help.txt
for verb in train launch plan compare data ckpt; do
  grep -q "^  $verb" help.txt || { cat help.txt; fail "--help does not list $verb"; }
  "$bin" $verb --help > verb.txt || fail "$verb --help failed"
  [ "$(wc -l < verb.txt)" -ge 3 ] || { cat verb.txt; fail "$verb --help says too little"; }
done
"$bin" train --help | grep -q -- "--set" || fail "train --help lacks --set"
"$bin" train --help | grep -q -- "--resume" || fail "train --help lacks --resume"
"$bin" plan "$src/configs/tiny.yaml" | grep -q "params" || fail "plan prints no params"
echo "help ok"
