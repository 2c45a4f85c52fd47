#!/usr/bin/env bash
# A lent GPU's device time is 15 minutes, start included: this runs what gpu_check.sh measures
# in one call of under 10 minutes, using the whole machine. Half the host's cores run
# gpu_check (the CUDA tests on 4 pytest-xdist workers, bench_train, a short recipe, eval,
# bench_decode); the other half run scripts/bench/bf16.py on the host CPU at the same time,
# on a CPU recipe checkpoint carried in fp16 (a lent GPU's host may have AMX or avx512_bf16,
# which the project's own machines may lack). Files in $OUT: gpu_check's 7 and bench_cpu.log;
# scripts/bench/decode_profile.py's tables of a GPU decode end bench_decode.log.
#
#   bash scripts/gpu_check.sh --prepare                       # here: wheels and Multi30k
#   bash scripts/gpu_lease.sh --prepare runs/multi30k_de_en/best.pt   # here ($PYTHON: one with
#                                                             # torch): build/gpu/cpu_model.pt
#   bash scripts/gpu_lease.sh [--recipe-minutes M]            # there; carry build/wheels,
#                                                             # data/multi30k and build/gpu
#   bash scripts/gpu_lease.sh --steps recipe,eval --recipe-minutes 7 --limit 560 --no-profile
#                                                             # a longer recipe in one call
# --steps picks gpu_check's steps, --limit bounds them (seconds), --recipe-timeout bounds the
# recipe alone, --no-profile leaves out decode_profile (it needs the GPU to itself).
# How it went the first time, and what to run next: docs/studies/on-a-gpu.md.
set -u
cd "$(dirname "$0")/.."
CKPT=build/gpu/cpu_model.pt MINUTES=2 STEPS=tests,bench_train,recipe,eval,bench_decode
LIMIT=480 RECIPE_TIMEOUT="" PROFILE=1
while [ $# -gt 0 ]; do
    case $1 in
    --prepare)
        mkdir -p build/gpu
        # fp16 weights: half the bytes of the 64 MiB a call carries; decoding casts them back
        ${PYTHON:-python3} -c '
import sys, torch
ck = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
ck["model"] = {k: v.half() if v.is_floating_point() else v for k, v in ck["model"].items()}
ck["train_state"] = None
torch.save(ck, sys.argv[2])' "$2" "$CKPT" || exit 1
        du -sh "$CKPT" && exit 0 ;;
    --recipe-minutes) MINUTES=$2 && shift ;;
    --recipe-timeout) RECIPE_TIMEOUT=$2 && shift ;;
    --steps) STEPS=$2 && shift ;;
    --limit) LIMIT=$2 && shift ;;
    --no-profile) PROFILE=0 ;;
    *) echo "gpu_lease: unknown option $1 (see the top of $0)" >&2 && exit 2 ;;
    esac
    shift
done
OUT=${OUT:-runs/gpu_lease_out}
mkdir -p "$OUT"
N=$(nproc) H=$(($(nproc) / 2))
echo "nproc $N; $(grep -m1 'model name' /proc/cpuinfo)"
pin() { if command -v taskset >/dev/null && taskset -c "$1" true 2>/dev/null; then echo "taskset -c $1"; fi; }
PA=$(pin 0-$((H - 1))) PB=$(pin $H-$((N - 1)))
echo "gpu_check on ${PA:-all cores}; bench_cpu on ${PB:-all cores}"
python3 -c "import xdist" 2>/dev/null && export PYTEST_ADDOPTS="-n 4"
(OUT=$OUT OMP_NUM_THREADS=$H timeout -k 5 "$LIMIT" $PA bash scripts/gpu_check.sh --quick \
    --steps "$STEPS" --tests-k "cuda or not cuda" --tests-timeout 200 \
    --recipe-minutes "$MINUTES" --recipe-timeout "${RECIPE_TIMEOUT:-$(python3 -c "print(int(60 * $MINUTES + 50))")}" \
    >"${TMPDIR:-/tmp}/gpu_lease_a.out" 2>&1) &
sleep 4 # gpu_check clears $OUT/*.log as it starts
if [ -f "$CKPT" ]; then
    SITE=${TMPDIR:-/tmp}/gpu_lease_site # its own copy: gpu_check installs into another
    python3 -m pip install -q --no-index --no-deps --target "$SITE" build/wheels/*.whl >/dev/null 2>&1
    PYTHONPATH=$PWD:$SITE MT_DATA=$PWD/data/multi30k OMP_NUM_THREADS=$((N - H)) PYTHONUNBUFFERED=1 \
        timeout -k 5 $((LIMIT - 10)) $PB python3 -m scripts.bench.bf16 --checkpoint "$CKPT" --threads $((N - H)) \
        --steps 10 --warmup 2 --rounds 3 --limit 200 --beams 1,5 --precisions fp32,bf16 \
        --dtypes fp32,bf16 --no-int8 >"$OUT/bench_cpu.log" 2>&1
    echo "bench_cpu rc $?" >>"$OUT/bench_cpu.log"
else
    echo "no $CKPT: bench_cpu left out (gpu_lease.sh --prepare CHECKPOINT makes it)"
fi
wait
if [ -f "$CKPT" ] && [ $PROFILE = 1 ]; then # where GPU decoding's time goes (greedy, fp16), after the timed runs
    PYTHONPATH=$PWD:$SITE MT_DATA=$PWD/data/multi30k timeout -k 5 80 python3 -m scripts.bench.decode_profile \
        "$CKPT" --device cuda --dtype fp16 --limit 300 >>"$OUT/bench_decode.log" 2>&1
fi
tail -n 12 "${TMPDIR:-/tmp}/gpu_lease_a.out"
grep -h FAILED "$OUT/tests.log" 2>/dev/null | sort -u | head
grep -E '^(train|decode) |rc ' "$OUT/bench_cpu.log" 2>/dev/null
