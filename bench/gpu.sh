#!/usr/bin/env bash
# The certification's GPU path on one GPU machine, in at most 8 minutes (prints figures; each
# step says PASS, FAIL or SKIP, and the script exits non-zero if any failed). Steps in order of
# value, each with its own time limit, all inside the 8 minutes:
#   1. the environment: Python, torch and its CUDA build, the GPUs, NCCL, nvcc
#   2. the smoke training, preset 1b, 200 steps on one GPU: MFU against the GPU's bf16 peak
#      (steps after the warm-up), tokens/s, loss drop, step time p50/p99
#   3. nccl-tests 2.17.8 built for this GPU's architecture against the installed NCCL (the system's,
#      else the nvidia-nccl wheel torch brought), `all_reduce_perf -b 32M -e 8G -f 2 -g 1`
#   4. two ranks sharing the GPU over gloo, a gradient fault injected on rank 1 at step 5: the
#      training stops at step 5 (naming both ranks: two cannot outvote each other)
#   5. the torch all-reduce sweep on one GPU (NCCL), its data check in bf16
#   6. a run that must have a GPU (--require-cuda) but sees none is refused, naming host and rank
#
# Usage: bench/gpu.sh [--dry-run] [OUTDIR]   (default: a new folder under /tmp; outputs kept there)
#   --dry-run          no GPU needed: runs here on the CPU what can run (1, 4 and 5 on gloo, 6) and
#                      prints the build and run lines of 2 and 3
#   PYTHON             a Python with torch (default: the project's .venv where it has torch, else python3)
#   NCCL_TESTS_SOURCE  nccl-tests' source, a folder or a release tarball on this machine (nothing is
#                      downloaded; default bench/vendor/nccl-tests-2.17.8.tar.gz, which git ignores:
#                      copy NVIDIA's release there and carry it to the GPU machine)
#   CUDA_HOME          the CUDA toolkit (default: the one nvcc on PATH comes from)
#   NCCL_HOME          the NCCL to build against (default: /usr where nccl.h is there, else the
#                      nvidia-nccl wheel's folder)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PAYLOAD=$ROOT/provisioner/certify/payload
FIGURES=$ROOT/bench/gpu_figures.py
DRY_RUN=0
if [ "${1:-}" = --dry-run ]; then
    DRY_RUN=1
    shift
fi
if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    if [ -x "$ROOT/.venv/bin/python" ] && "$ROOT/.venv/bin/python" -c 'import torch' 2>/dev/null; then
        PYTHON=$ROOT/.venv/bin/python
    fi
fi
OUT=${1:-$(mktemp -d /tmp/provision-gpu-bench.XXXXXX)}
mkdir -p "$OUT"
NCCL_TESTS_SOURCE=${NCCL_TESTS_SOURCE:-$ROOT/bench/vendor/nccl-tests-2.17.8.tar.gz}
BUDGET_S=480
failures=0

say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
verdict() {  # verdict STEP STATUS(0 pass, 124 timed out) DETAIL
    case $2 in
        0) say "PASS $1: $3" ;;
        124) say "FAIL $1: timed out; $3"; failures=$((failures + 1)) ;;
        *) say "FAIL $1: $3"; failures=$((failures + 1)) ;;
    esac
}
limit() {  # limit SECONDS: the step's own limit, cut to what is left of the budget
    local left=$((BUDGET_S - SECONDS))
    [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
torchrun() {  # torchrun SECONDS RANKS SCRIPT ARGS... (one node, loopback)
    local seconds=$1 ranks=$2 script=$3
    shift 3
    GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo OMP_NUM_THREADS=4 \
        timeout "$seconds" "$PYTHON" -m torch.distributed.run --nproc-per-node="$ranks" \
        --master-port=$((29500 + RANDOM % 1000)) "$PAYLOAD/$script" "$@"
}
step() {  # step NAME SECONDS: true when the step has time left to run
    if [ "$(limit "$2")" -lt 10 ]; then
        say "SKIP $1: the ${BUDGET_S} s budget is spent"
        return 1
    fi
}
tail_of() { tail -n 3 "$1" 2>/dev/null | tr '\n' ' '; }

say "bench/gpu.sh $(date -u +%FT%TZ) on $(hostname)$([ "$DRY_RUN" = 1 ] && echo ', dry run'); outputs in $OUT"

# 1. The environment.
timeout 60 "$PYTHON" - "$DRY_RUN" >"$OUT/environment.txt" 2>&1 <<'EOF'
import platform, shutil, subprocess, sys
dry_run = sys.argv[1] == "1"
import torch
print(f"Python {platform.python_version()}, torch {torch.__version__} built for CUDA {torch.version.cuda or 'none'}")
if torch.cuda.is_available():
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        print(f"GPU {i}: {torch.cuda.get_device_name(i)}, sm_{major}{minor}; torch's NCCL {nccl}")
nvcc = shutil.which("nvcc")
print(subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
      if nvcc else "nvcc: not on PATH")
if not torch.cuda.is_available() and not dry_run:
    sys.exit(f"torch {torch.__version__} sees no GPU (built for CUDA {torch.version.cuda or 'none'})")
EOF
status=$?
verdict environment "$status" "$(tr '\n' ';' <"$OUT/environment.txt" | sed 's/;$//; s/;/; /g')"
[ "$status" -eq 0 ] || { say "$failures step(s) failed"; exit 1; }

# 2. Preset 1b, 200 steps, one rank.
train_args=(--preset 1b --steps 200 --warmup-steps 20 --require-cuda)
if [ "$DRY_RUN" = 1 ]; then
    say "DRY 1b training: would run: torchrun --nproc-per-node=1 smoke_train.py ${train_args[*]}"
elif step "1b training" 200; then
    torchrun "$(limit 200)" 1 smoke_train.py "${train_args[@]}" >"$OUT/train-1b.out" 2>"$OUT/train-1b.err"
    status=$?
    figures=$("$PYTHON" "$FIGURES" training "$OUT/train-1b.out" 2>>"$OUT/train-1b.err")
    verdict "1b training" $((status == 124 ? 124 : status | $?)) "${figures:-no result: $(tail_of "$OUT/train-1b.err")}"
fi

# 3. nccl-tests against the installed NCCL, built for this GPU only.
build=$OUT/nccl-tests
nccl_tests() {
    local cuda_home=${CUDA_HOME:-} nccl_home=${NCCL_HOME:-} arch nvcc
    nvcc=$(command -v nvcc || true)
    if [ -z "$cuda_home" ] && [ -n "$nvcc" ]; then
        cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
    fi
    if [ -z "$nccl_home" ] && [ -f /usr/include/nccl.h ]; then
        nccl_home=/usr
    elif [ -z "$nccl_home" ]; then
        # The nvidia-nccl wheel: a namespace package (its __file__ is None), headers and
        # libnccl.so.2, no libnccl.so for the linker: a folder of links here gives it one.
        local wheel
        wheel=$("$PYTHON" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
        if [ -z "$wheel" ] && [ "$DRY_RUN" = 1 ]; then
            wheel="<the nvidia-nccl wheel's folder>"
        elif [ -z "$wheel" ]; then
            echo "no NCCL: no /usr/include/nccl.h and no nvidia-nccl wheel for $PYTHON"
            return 1
        fi
        nccl_home=$OUT/nccl-home
        mkdir -p "$nccl_home/lib"
        ln -sfn "$wheel/include" "$nccl_home/include"
        ln -sf "$wheel/lib/libnccl.so.2" "$nccl_home/lib/libnccl.so.2"
        ln -sf libnccl.so.2 "$nccl_home/lib/libnccl.so"
    fi
    arch=$("$PYTHON" -c 'import torch; print("%d%d" % torch.cuda.get_device_capability(0))' 2>/dev/null || echo 90)
    local make_line=(make -C "$build/src" -j "$(nproc)" BUILDDIR="$build/build" MPI=0 CUDA_HOME="$cuda_home"
                     NCCL_HOME="$nccl_home" "NVCC_GENCODE=-gencode=arch=compute_$arch,code=sm_$arch"
                     "$build/build/all_reduce_perf")
    local libraries="$nccl_home/lib:${cuda_home:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local run_line=(env LD_LIBRARY_PATH="$libraries" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT
                    "$build/build/all_reduce_perf" -b 32M -e 8G -f 2 -g 1)
    mkdir -p "$build"
    if [ -d "$NCCL_TESTS_SOURCE" ]; then
        cp -r "$NCCL_TESTS_SOURCE/." "$build/"
    elif [ -f "$NCCL_TESTS_SOURCE" ]; then
        tar -xzf "$NCCL_TESTS_SOURCE" -C "$build" --strip-components=1 || return 1
    elif [ "$DRY_RUN" = 1 ]; then
        echo "no nccl-tests source at $NCCL_TESTS_SOURCE to read the build from; would build: ${make_line[*]};" \
             "would run: ${run_line[*]}"
        return 3
    else
        echo "no nccl-tests source at $NCCL_TESTS_SOURCE (copy NVIDIA's 2.17.8 release tarball there)"
        return 1
    fi
    if [ "$DRY_RUN" = 1 ]; then
        # make -n: the commands the build would run, from the real Makefile, without compiling.
        "${make_line[@]}" -n NVCC="${nvcc:-nvcc}" >"$OUT/nccl-tests-build.log" 2>&1 || {
            echo "make -n failed: $(tail_of "$OUT/nccl-tests-build.log")"; return 1; }
        grep -q -- "-gencode=arch=compute_$arch,code=sm_$arch" "$OUT/nccl-tests-build.log" || {
            echo "make -n does not compile for sm_$arch: $(tail_of "$OUT/nccl-tests-build.log")"; return 1; }
        echo "would build: ${make_line[*]} ($(grep -c -- '-gencode' "$OUT/nccl-tests-build.log") nvcc/link lines," \
             "sm_$arch only); would run: ${run_line[*]}"
        return 0
    fi
    [ -n "$cuda_home" ] || { echo "no nvcc on PATH and no CUDA_HOME"; return 1; }
    echo "building for sm_$arch with CUDA_HOME=$cuda_home NCCL_HOME=$nccl_home" >"$OUT/nccl-tests-build.log"
    timeout "$(limit 240)" "${make_line[@]}" >>"$OUT/nccl-tests-build.log" 2>&1 || {
        echo "build failed: $(tail_of "$OUT/nccl-tests-build.log")"; return 1; }
    local missing
    missing=$(LD_LIBRARY_PATH=$libraries ldd "$build/build/all_reduce_perf" | grep 'not found' | tr '\n' ' ')
    if [ -n "$missing" ]; then
        echo "all_reduce_perf cannot load: $missing"
        return 1
    fi
    timeout "$(limit 120)" "${run_line[@]}" >"$OUT/all_reduce_perf.out" 2>&1 || {
        echo "all_reduce_perf failed: $(tail_of "$OUT/all_reduce_perf.out")"; return 1; }
    "$PYTHON" "$FIGURES" nccl-tests "$OUT/all_reduce_perf.out"
}
if step nccl-tests 60; then
    nccl_tests >"$OUT/nccl-tests.txt" 2>&1
    status=$?
    if [ "$status" -eq 3 ]; then  # a dry run without the source: nothing to check the build against
        say "SKIP nccl-tests: $(tail -n 1 "$OUT/nccl-tests.txt")"
    else
        verdict nccl-tests "$status" "$([ "$DRY_RUN" = 1 ] && echo 'dry run: ')$(tail -n 1 "$OUT/nccl-tests.txt")"
    fi
fi

# 4. Two ranks on one GPU (on the CPU in a dry run) over gloo, gradient fault on rank 1 at step 5.
preset=small
[ "$DRY_RUN" = 1 ] && preset=tiny
if step "injected gradient fault" 90; then
    torchrun "$(limit 90)" 2 smoke_train.py --preset "$preset" --steps 50 --backend gloo --inject-grad-fault 1 \
        --inject-at-step 5 >"$OUT/fault.out" 2>"$OUT/fault.err"
    status=$?
    figures=$("$PYTHON" "$FIGURES" fault "$OUT/fault.out" 2>>"$OUT/fault.err")
    verdict "injected gradient fault" $((status == 124 ? 124 : $?)) "${figures:-no result: $(tail_of "$OUT/fault.err")}"
fi

# 5. The torch sweep: one GPU in bf16 over NCCL; two CPU ranks over gloo in a dry run.
if step sweep 60; then
    if [ "$DRY_RUN" = 1 ]; then
        torchrun "$(limit 60)" 2 sweep.py --min-bytes 1M --max-bytes 4M --gradient-bytes 4M --dtype bfloat16 \
            --iters 3 --repeats 3 >"$OUT/sweep.out" 2>"$OUT/sweep.err"
        backend=gloo
    else
        torchrun "$(limit 60)" 1 sweep.py --min-bytes 32M --max-bytes 1G --gradient-bytes 100M --dtype bfloat16 \
            --require-cuda >"$OUT/sweep.out" 2>"$OUT/sweep.err"
        backend=nccl
    fi
    status=$?
    figures=$("$PYTHON" "$FIGURES" sweep "$OUT/sweep.out" "$backend" 2>>"$OUT/sweep.err")
    verdict sweep $((status == 124 ? 124 : status | $?)) "${figures:-no result: $(tail_of "$OUT/sweep.err")}"
fi

# 6. A GPU node's rank without a GPU refuses to run.
if step "CUDA-less run refused" 45; then
    CUDA_VISIBLE_DEVICES="" torchrun "$(limit 45)" 1 sweep.py --min-bytes 1M --max-bytes 1M --gradient-bytes 1M \
        --require-cuda >"$OUT/refused.out" 2>"$OUT/refused.err"
    status=$?
    refusal=$(grep -m 1 '^PROVISION-REFUSED ' "$OUT/refused.out")
    [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && [ -n "$refusal" ]
    verdict "CUDA-less run refused" $? "exit status $status; ${refusal:-no refusal printed}"
fi

say "$failures step(s) failed in ${SECONDS} s"
[ "$failures" -eq 0 ]
