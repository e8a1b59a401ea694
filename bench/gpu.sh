#!/usr/bin/env bash
# The certification's GPU path on one GPU machine, in under 10 minutes (prints figures; each
# step says PASS or FAIL, and the script exits non-zero if any failed):
#   1. the smoke training, preset 1b, 200 steps on one GPU: MFU, tokens/s, loss drop, step time
#   2. a run that must have a GPU (--require-cuda) but sees none is refused, naming host and rank
#   3. the torch all-reduce sweep on one GPU (NCCL), its data check in bf16
#   4. two ranks sharing the GPU over gloo, a gradient fault injected on rank 1 at step 5: the
#      training stops at step 5 (naming both ranks: two cannot outvote each other)
#   5. nccl-tests built against the installed NCCL, `all_reduce_perf -b 32M -e 8G -f 2 -g 1`,
#      read by `provision inspect nccl-tests`
#
# Usage: bench/gpu.sh [OUTDIR]   (default: a new folder under /tmp; every output is kept there)
#   PYTHON             a Python whose torch has CUDA (default: python3)
#   NCCL_TESTS_SOURCE  nccl-tests source: a folder or a release tarball (path or URL);
#                      default the 2.17.8 release on GitHub
#   CUDA_HOME          the CUDA toolkit nvcc comes from (default: where nvcc is, else /usr/local/cuda)
#   NCCL_HOME          the NCCL to build against (default: /usr where nccl.h is there, else the
#                      nvidia-nccl wheel torch brought)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PAYLOAD=$ROOT/provisioner/certify/payload
PYTHON=${PYTHON:-python3}
OUT=${1:-$(mktemp -d /tmp/provision-gpu-bench.XXXXXX)}
mkdir -p "$OUT"
NCCL_TESTS_SOURCE=${NCCL_TESTS_SOURCE:-https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.17.8.tar.gz}
failures=0

say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
verdict() {  # verdict STEP STATUS(0 pass) DETAIL
    if [ "$2" -eq 0 ]; then say "PASS $1: $3"; else say "FAIL $1: $3"; failures=$((failures + 1)); fi
}
torchrun() {  # torchrun SECONDS RANKS SCRIPT ARGS... (one node, loopback, at most SECONDS)
    local seconds=$1 ranks=$2 script=$3
    shift 3
    GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo OMP_NUM_THREADS=4 \
        timeout "$seconds" "$PYTHON" -m torch.distributed.run --nproc-per-node="$ranks" --master-port=$((29500 + RANDOM % 1000)) \
        "$PAYLOAD/$script" "$@"
}

say "bench/gpu.sh $(date -u +%FT%TZ) on $(hostname); outputs in $OUT"
if ! "$PYTHON" - >"$OUT/environment.txt" 2>&1 <<'EOF'
import torch
assert torch.cuda.is_available(), f"torch {torch.__version__} sees no GPU (built for CUDA {torch.version.cuda})"
print(f"torch {torch.__version__} CUDA {torch.version.cuda} NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
for i in range(torch.cuda.device_count()):
    print(f"GPU {i}: {torch.cuda.get_device_name(i)}")
EOF
then
    say "FAIL environment: $(tail -n 1 "$OUT/environment.txt")"
    exit 1
fi
say "$(cat "$OUT/environment.txt")"

# 1. preset 1b, 200 steps, one rank.
torchrun 420 1 smoke_train.py --preset 1b --steps 200 --require-cuda >"$OUT/train-1b.out" 2>"$OUT/train-1b.err"
status=$?
figures=$("$PYTHON" - "$OUT/train-1b.out" 2>>"$OUT/train-1b.err" <<'EOF'
import json, statistics, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("PROVISION-TRAIN "))
rank = json.loads(line.split(" ", 1)[1])["ranks"][0]
loss, times = rank["records"]["loss"], rank["records"]["step_time_s"]
head, tail = statistics.fmean(loss[:10]), statistics.fmean(loss[-max(1, len(loss) // 10):])
drop = 1 - tail / head
steady = times[min(50, len(times) // 5):]
mfu = f"{rank['mfu']:.1%}" if rank["mfu"] is not None else f"unknown (no peak for {rank['device_name']})"
print(f"{rank['device_name']}, {rank['parameters'] / 1e9:.2f} B parameters, bf16 {rank['bf16']}, "
      f"{rank['steps_done']}/{rank['steps_requested']} steps: MFU {mfu}, {rank['tokens_per_second']:.0f} tokens/s, "
      f"loss {head:.3f} -> {tail:.3f} (drop {drop:.1%}, preset asks {rank['loss_drop_min']:.0%}), "
      f"step time median {statistics.median(steady) * 1000:.1f} ms, p99 "
      f"{sorted(steady)[int(0.99 * (len(steady) - 1))] * 1000:.1f} ms, torch NCCL {rank['nccl_version']}")
sys.exit(0 if rank["violation"] is None and rank["steps_done"] == 200 and drop >= rank["loss_drop_min"] else 1)
EOF
)
verdict "1b training" $((status | $?)) "${figures:-no result: $(tail -n 3 "$OUT/train-1b.err" | tr '\n' ' ')}"

# 2. a GPU node's rank without a GPU refuses to run.
CUDA_VISIBLE_DEVICES="" torchrun 120 1 sweep.py --min-bytes 1M --max-bytes 1M --gradient-bytes 1M \
    --require-cuda >"$OUT/refused.out" 2>"$OUT/refused.err"
status=$?
refusal=$(grep -m 1 '^PROVISION-REFUSED ' "$OUT/refused.out")
[ "$status" -ne 0 ] && [ -n "$refusal" ]
verdict "CUDA-less run refused" $? "exit status $status; ${refusal:-no refusal printed}"

# 3. the torch sweep on one GPU, bf16.
torchrun 300 1 sweep.py --min-bytes 32M --max-bytes 1G --gradient-bytes 100M --dtype bfloat16 \
    --require-cuda >"$OUT/sweep.out" 2>"$OUT/sweep.err"
status=$?
figures=$("$PYTHON" - "$OUT/sweep.out" 2>>"$OUT/sweep.err" <<'EOF'
import json, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("PROVISION-SWEEP "))
facts = json.loads(line.split(" ", 1)[1])
wrong = sum(row["wrong"] or 0 for row in facts["rows"])
print(f"{facts['backend']}, {facts['ranks']} rank, {facts['dtype']}: "
      + ", ".join(f"{row['size_bytes'] >> 20} MiB {row['time_us']:.0f} us" for row in facts["rows"])
      + f"; wrong elements {wrong}")
sys.exit(0 if wrong == 0 and facts["backend"] == "nccl" else 1)
EOF
)
verdict "sweep on one GPU" $((status | $?)) "${figures:-no result: $(tail -n 3 "$OUT/sweep.err" | tr '\n' ' ')}"

# 4. two ranks on one GPU over gloo, gradient fault on rank 1 at step 5.
torchrun 300 2 smoke_train.py --preset small --steps 50 --backend gloo --inject-grad-fault 1 \
    --inject-at-step 5 >"$OUT/fault.out" 2>"$OUT/fault.err"
status=$?
figures=$("$PYTHON" - "$OUT/fault.out" 2>>"$OUT/fault.err" <<'EOF'
import json, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("PROVISION-TRAIN "))
ranks = json.loads(line.split(" ", 1)[1])["ranks"]
violation = ranks[0]["violation"] or {}
print(f"{ranks[0]['backend']} on {ranks[0]['device']} and {ranks[1]['device']}: {violation.get('check')} at step "
      f"{violation.get('step')} on ranks {violation.get('ranks')}, {ranks[0]['steps_done']} steps run")
# Two ranks cannot outvote each other: both are named, at the step of the fault.
sys.exit(0 if (violation.get("check"), violation.get("step")) == ("grad_norm_consistency", 5)
         and 1 in violation.get("ranks", []) else 1)
EOF
)
verdict "injected gradient fault" $((status | $?)) "${figures:-no result: $(tail -n 3 "$OUT/fault.err" | tr '\n' ' ')}"

# 5. nccl-tests against the installed NCCL.
build=$OUT/nccl-tests
nccl_tests() {
    mkdir -p "$build"
    if [ -d "$NCCL_TESTS_SOURCE" ]; then
        cp -r "$NCCL_TESTS_SOURCE/." "$build/"
    else
        local tarball=$NCCL_TESTS_SOURCE
        if [ ! -f "$tarball" ]; then
            tarball=$OUT/nccl-tests.tar.gz
            curl -fsSL --max-time 60 -o "$tarball" "$NCCL_TESTS_SOURCE" || { echo "cannot fetch $NCCL_TESTS_SOURCE"; return 1; }
        fi
        tar -xzf "$tarball" -C "$build" --strip-components=1 || return 1
    fi
    local cuda_home=${CUDA_HOME:-}
    if [ -z "$cuda_home" ]; then
        cuda_home=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
    fi
    local nccl_home=${NCCL_HOME:-}
    if [ -z "$nccl_home" ] && [ -f /usr/include/nccl.h ]; then
        nccl_home=/usr
    elif [ -z "$nccl_home" ]; then  # the NCCL wheel torch brought: headers and libnccl.so.2
        nccl_home=$("$PYTHON" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))') || return 1
        [ -e "$nccl_home/lib/libnccl.so" ] || ln -sf libnccl.so.2 "$nccl_home/lib/libnccl.so"
    fi
    echo "building with CUDA_HOME=$cuda_home NCCL_HOME=$nccl_home"
    make -C "$build" -j "$(nproc)" MPI=0 CUDA_HOME="$cuda_home" NCCL_HOME="$nccl_home" \
        NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >"$OUT/nccl-tests-build.log" 2>&1 || {
        echo "build failed: $(tail -n 3 "$OUT/nccl-tests-build.log" | tr '\n' ' ')"; return 1; }
    LD_LIBRARY_PATH=$nccl_home/lib:${LD_LIBRARY_PATH:-} NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT \
        timeout 300 "$build/build/all_reduce_perf" -b 32M -e 8G -f 2 -g 1 >"$OUT/all_reduce_perf.out" 2>&1 || {
        echo "all_reduce_perf failed: $(tail -n 3 "$OUT/all_reduce_perf.out" | tr '\n' ' ')"; return 1; }
    local inspect=("$ROOT/.venv/bin/provision" inspect nccl-tests)
    [ -x "${inspect[0]}" ] || inspect=(env PYTHONPATH="$ROOT" "$PYTHON" -m provisioner.cli inspect nccl-tests)
    "${inspect[@]}" "$OUT/all_reduce_perf.out" >"$OUT/all_reduce_perf.json" || {
        echo "provision inspect nccl-tests refused the output"; return 1; }
    "$PYTHON" - "$OUT/all_reduce_perf.json" <<'EOF'
import json, sys
facts = json.load(open(sys.argv[1]))
last = facts["rows"][-1]
print(f"{facts['ranks']} rank, NCCL {facts['nccl_version']}, nccl-tests {facts['nccl_tests_version']}: "
      f"{len(facts['rows'])} sizes, {last['size_bytes'] >> 20} MiB in {last['out_of_place']['time_us']:.0f} us "
      f"(algbw {last['out_of_place']['algbw_gbps']} GB/s), wrong "
      f"{sum((r[p]['wrong'] or 0) for r in facts['rows'] for p in ('out_of_place', 'in_place'))}")
EOF
}
nccl_tests >"$OUT/nccl-tests.txt" 2>&1
status=$?
verdict "nccl-tests" "$status" "$(tail -n 1 "$OUT/nccl-tests.txt")"

say "$failures step(s) failed"
[ "$failures" -eq 0 ]
