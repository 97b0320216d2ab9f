#!/usr/bin/env bash
# The GPU check (docs/throughput.md, "GPU check"): what only a CUDA device can show, in one run
# that prints one table at the end.
#
#   1. the tests marked `gpu` (tests/services/learner/test_gpu.py): the device expansion of packed rows, CUDA
#      forward/backward against the CPU within the precision's tolerance, the ratio check under
#      bf16 (five iterations, no false halt; stale weights still halt), a checkpoint written on
#      CUDA loaded on the CPU and back with identical state digests, the start-up memory check,
#      and verify-resume --profile tiny on CUDA under run_exact;
#   2. royalefleet bench --profile laptop: update rows/s, inference ms per round, iteration time.
#
# It runs under a plain python3 with that machine's own torch (set PYTHON to choose another),
# never the pinned venv and never `make` (which would build one). On the accelerator machine,
# which reaches no registry, carry the wheels ../shared/tools/device-wheels downloads and begin
# the command as that script's header says, then:  bash deploy/gpu-check.sh
# Without CUDA it prints one line saying so and exits 0 (CI machines have no GPU).
# Finishes in about 4-6 minutes on an H200-class machine (each step has its own time limit;
# GPU_CHECK_BENCH_S and GPU_CHECK_TESTS_S change them).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TESTS_S=${GPU_CHECK_TESTS_S:-240}
BENCH_S=${GPU_CHECK_BENCH_S:-180}

if ! device=$("$PY" -c 'import torch, sys
if not torch.cuda.is_available():
    sys.exit(1)
print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")' 2>/dev/null); then
    echo "gpu-check: skipped: no CUDA device here ($("$PY" -c 'import torch; print("torch", torch.__version__, "sees none")' 2>/dev/null || echo "no torch for $PY"))"
    exit 0
fi

# cuBLAS reads this once, when CUDA initialises, in every process that does CUDA work; the
# launcher sets it for the learner, the test process and the bench read it from here.
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1
log=$(mktemp -d "${TMPDIR:-/tmp}/royalefleet-gpu-check.XXXXXX")
echo "gpu-check: $device; logs in $log"
start=$(date +%s)

echo "gpu-check: 1/2 the gpu tests (at most ${TESTS_S} s) ..."
timeout "$TESTS_S" "$PY" -m pytest -q -m gpu -s -p no:cacheprovider tests/services/learner/test_gpu.py 2>&1 | tee "$log/tests.txt"
tests_rc=${PIPESTATUS[0]}

echo "gpu-check: 2/2 royalefleet bench --profile laptop (at most ${BENCH_S} s) ..."
timeout "$BENCH_S" "$PY" -m royalefleet bench --profile laptop --seconds 10 --iterations 2 --reference none 2>&1 \
    | tee "$log/bench.txt"
bench_rc=${PIPESTATUS[0]}

pick() {  # the value column of a bench line, or "-"
    local v
    v=$(grep -m1 -F "$1" "$log/bench.txt" | sed -E "s/^.{40}//; s/^ +//")
    echo "${v:--}"
}
gpuline() {  # a [gpu] line of the tests, without its prefix, or "-"
    local v
    v=$(grep -m1 -F "[gpu] $1" "$log/tests.txt" | sed -E 's/^.*\[gpu\] //')
    echo "${v:--}"
}
verdict() { [ "$1" -eq 0 ] && echo "passed" || { [ "$1" -eq 124 ] && echo "TIMED OUT" || echo "FAILED (exit $1)"; }; }
tests_summary=$(grep -E "^[0-9]+ (passed|failed)|(passed|failed|skipped).* in [0-9.]+s" "$log/tests.txt" | tail -1)

echo
echo "GPU check, $(date -u +%Y-%m-%d), $device, $(nproc) CPUs, $(( $(date +%s) - start )) s"
printf '%-44s %s\n' \
    "gpu tests" "$(verdict "$tests_rc"): ${tests_summary:-no summary}" \
    "CUDA vs CPU, fp32 (TF32 off)" "$(gpuline 'fp32: ' | sed 's/^fp32: CUDA vs CPU //')" \
    "CUDA vs CPU, bf16 autocast" "$(gpuline 'bf16: ' | sed 's/^bf16: CUDA vs CPU //')" \
    "bf16 ratio deviation, 5 iterations" "$(gpuline 'bf16 on CUDA' | sed 's/^.*per iteration //')" \
    "checkpoint CUDA -> CPU -> CUDA digests" "$(gpuline 'state digest' | sed 's/^.*: //')" \
    "start-up memory check (laptop)" "$(gpuline 'learner: device memory' | sed 's/^learner: device memory: //')" \
    "verify-resume tiny, CUDA, run_exact" "$(gpuline 'verify-resume tiny')" \
    "bench --profile laptop" "$(verdict "$bench_rc")" \
    "update rows/s (stack)" "$(pick 'update rows/s')" \
    "update rows/s (update bench, 4,096 rows)" "$(grep -E '^update rows/s' "$log/bench.txt" | tail -1 | awk '{print $3}')" \
    "inference ms per round" "$(pick 'inference ms per round')" \
    "iteration seconds (update seconds)" "$(pick 'iteration seconds')" \
    "learner precision" "$(pick 'learner precision')" \
    "VRAM peak allocated MiB" "$(pick 'VRAM peak allocated')" \
    "stack decisions/s (collection)" "$(pick 'stack decisions/s')"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
