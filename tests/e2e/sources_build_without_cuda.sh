# A machine without CUDA (a fresh Debian 12: the README's two commands) builds with no cuda backend,
# and so without TRAINER_HAVE_CUDA. CI has /usr/local/cuda and never builds that way, so this test
# does it for the preprocessor: every source this build compiled with TRAINER_HAVE_CUDA, but for
# the cuda backend's own (runtime/cuda/, kernels/, *.cu, cuda_ops_bench: a build without CUDA
# leaves them out), is preprocessed as that build would: without TRAINER_HAVE_CUDA and
# TRAINER_HAVE_CUDNN and without CUDA's include directories. An include of a CUDA header
# (cublasLt.h, cuda_runtime.h, nccl.h, cudnn*.h, or a runtime/cuda header that includes one) outside
# `#ifdef TRAINER_HAVE_CUDA` fails here, naming the file. Calls into the cuda backend that only a
# link would miss are not caught (a full second build would double CI's build time).
source "$2/tests/lib/common.sh"
commands="$(dirname "$bin")/compile_commands.json"
[ -f "$commands" ] || fail "no $commands (CMAKE_EXPORT_COMPILE_COMMANDS is on in CMakeLists.txt)"
set +e
/usr/bin/python3 - "$commands" <<'PY'
import json, os, re, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

entries = json.load(open(sys.argv[1]))
cuda_own = re.compile(r"/(runtime/cuda|kernels)/|\.cu$|/cuda_ops_bench\.cpp$")
todo = [e for e in entries
        if "-DTRAINER_HAVE_CUDA" in e["command"] and not cuda_own.search(e["file"])]
if not todo:
    print("SKIPPED: this build has no cuda backend, so it built every source without CUDA already")
    sys.exit(77)

def holds_cuda_headers(directory):
    return any(os.path.exists(os.path.join(directory, h))
               for h in ("cuda_runtime.h", "cublasLt.h", "nccl.h", "cudnn.h"))

def without_cuda(entry):
    args, cleaned, i = shlex.split(entry["command"]), [], 0
    while i < len(args):
        a = args[i]
        if a in ("-isystem", "-I") and i + 1 < len(args) and holds_cuda_headers(args[i + 1]):
            i += 2
            continue
        if a.startswith("-DTRAINER_HAVE_CUD") or (a.startswith("-I") and holds_cuda_headers(a[2:])):
            i += 1
            continue
        if a == "-o":  # preprocess only, to nowhere
            i += 2
            continue
        cleaned.append(a)
        i += 1
    return cleaned + ["-E", "-o", "/dev/null"]

def run(entry):
    r = subprocess.run(without_cuda(entry), cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], r.returncode, r.stderr

failed = 0
with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    for path, rc, err in pool.map(run, todo):
        if rc != 0:
            failed += 1
            print("FAIL: %s does not preprocess without CUDA:\n%s" % (path, err.strip()[:2000]))
print("%d sources preprocessed without TRAINER_HAVE_CUDA and CUDA's headers; %d failed"
      % (len(todo), failed))
sys.exit(1 if failed else 0)
PY
rc=$?
set -e
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || fail "a source does not build without CUDA (above)"
