#!/usr/bin/env bash
# A lent GPU's device time is 15 minutes, start included: this runs what is still open on a GPU
# (docs/studies/on-a-gpu.md) in one call of under 10 minutes, using the whole machine.
#
#   1. every CUDA test (compile and torchrun included, 4 pytest-xdist workers) on cores 0-7,
#      while the GPU recipe trains for --recipe-minutes on cores 8-15: the tests share the GPU
#      with it, so the recipe's tokens/s from this call are not a speed to report;
#   2. then alone: scripts/bench/decode.py (mt, HF generate, CTranslate2; greedy and beam 5)
#      on the recipe's checkpoint, and scripts/bench/decode_profile.py of a GPU decode;
#   3. then alone: scripts/bench/train.py on synthetic batches and the recipe run's real
#      8k-token batches, fp32 and bf16, eager; then torch.compile'd, bf16 on the real batches
#      only (compiling takes minutes), so a call cut by --limit keeps the eager rows.
#
# The 8 files that come back (the most a call returns): tests/{summary.txt,tests.log,tests.xml},
# recipe/{summary.txt,recipe.log}, bench/{summary.txt,bench_decode.log,bench_train.log}.
#
#   bash scripts/gpu_check.sh --prepare          # here, with network: wheels and Multi30k
#   bash scripts/gpu_lease.sh [--recipe-minutes M] [--limit S] [--no-compile] [--no-profile]
#                                                # there; carry build/wheels and data/multi30k
set -u
cd "$(dirname "$0")/.."
MINUTES=1.5 LIMIT=510 COMPILE=1 PROFILE=1
while [ $# -gt 0 ]; do
    case $1 in
    --recipe-minutes) MINUTES=$2 && shift ;;
    --limit) LIMIT=$2 && shift ;;
    --no-compile) COMPILE=0 ;;
    --no-profile) PROFILE=0 ;;
    *) echo "gpu_lease: unknown option $1 (see the top of $0)" >&2 && exit 2 ;;
    esac
    shift
done
OUT=${OUT:-runs/gpu_lease_out}
RUN=runs/gpu_check_quick # gpu_check.sh --quick's run directory
mkdir -p "$OUT/tests" "$OUT/recipe" "$OUT/bench"
N=$(nproc) H=$(($(nproc) / 2)) START=$SECONDS
left() { echo $((LIMIT - (SECONDS - START))); }
echo "nproc $N; $(grep -m1 'model name' /proc/cpuinfo)"
pin() { if command -v taskset >/dev/null && taskset -c "$1" true 2>/dev/null; then echo "taskset -c $1"; fi; }
PA=$(pin 0-$((H - 1))) PB=$(pin $H-$((N - 1)))
python3 -c "import xdist" 2>/dev/null && export PYTEST_ADDOPTS="-n 4"
RECIPE_TIMEOUT=$(python3 -c "print(int(60 * $MINUTES + 60))")

(GPU_SITE=${TMPDIR:-/tmp}/mt_gpu_site_a OUT=$OUT/tests OMP_NUM_THREADS=$H timeout -k 5 $(($(left) - 200)) $PA bash scripts/gpu_check.sh \
    --quick --steps tests --tests-k "cuda or not cuda" --tests-timeout 240 \
    >"${TMPDIR:-/tmp}/gpu_lease_tests.out" 2>&1) &
OUT=$OUT/recipe OMP_NUM_THREADS=$((N - H)) timeout -k 5 $((RECIPE_TIMEOUT + 40)) $PB \
    bash scripts/gpu_check.sh --quick --steps recipe --recipe-minutes "$MINUTES" \
    --recipe-timeout "$RECIPE_TIMEOUT" >"${TMPDIR:-/tmp}/gpu_lease_recipe.out" 2>&1
wait
echo "tests and recipe done at $((SECONDS - START)) s"

OUT=$OUT/bench timeout -k 5 $(($(left) - 60)) bash scripts/gpu_check.sh --quick --steps bench_decode \
    >"${TMPDIR:-/tmp}/gpu_lease_bench.out" 2>&1
SITE=${TMPDIR:-/tmp}/mt_gpu_site # where gpu_check.sh installed the carried wheels for the recipe
export PYTHONPATH=$PWD:$SITE MT_DATA=$PWD/data/multi30k PYTHONUNBUFFERED=1
ckpt=$RUN/averaged.pt
[ -f "$ckpt" ] || ckpt=$RUN/best.pt
if [ $PROFILE = 1 ] && [ -f "$ckpt" ]; then # where GPU decoding's time goes (greedy, bf16)
    timeout -k 5 80 python3 -m scripts.bench.decode_profile "$ckpt" --device cuda --dtype bf16 \
        --limit 300 >>"$OUT/bench/bench_decode.log" 2>&1
fi
echo "decoding done at $((SECONDS - START)) s"

real=()
[ -f "$RUN/config.yaml" ] && real=(--run-dir "$RUN" --max-tokens 8192)
timeout -k 5 $(($(left) - 5)) python3 -m scripts.bench.train --device cuda --steps 20 --warmup 5 \
    --rounds 3 "${real[@]}" >"$OUT/bench/bench_train.log" 2>&1
echo "bench_train rc $? at $((SECONDS - START)) s" | tee -a "$OUT/bench/bench_train.log"
if [ $COMPILE = 1 ] && [ ${#real[@]} -gt 0 ]; then # compiled: bf16 on the real batches alone
    timeout -k 5 $(($(left) - 5)) python3 -m scripts.bench.train --device cuda --steps 20 \
        --warmup 5 --rounds 3 "${real[@]}" --compile-only --precisions bf16 --no-synthetic \
        >>"$OUT/bench/bench_train.log" 2>&1
    echo "bench_train compiled rc $? at $((SECONDS - START)) s" | tee -a "$OUT/bench/bench_train.log"
fi

for f in tests recipe bench; do tail -n 8 "$OUT/$f/summary.txt" 2>/dev/null; done
grep -h FAILED "$OUT/tests/tests.log" 2>/dev/null | sort -u | head
grep -E '^(synthetic|Multi30k)' "$OUT/bench/bench_train.log"
