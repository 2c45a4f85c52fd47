#!/usr/bin/env bash
# One command for a lent GPU: make mt importable beside the preinstalled torch, then run the
# CUDA tests, the training and decoding benchmarks, the GPU recipe and the bf16 benchmark of the
# device's own CPU, each under `timeout`, with every step's full log in $OUT (else
# runs/gpu_check_out) and a summary table printed last. How to run it in a lease: docs/studies/on-a-gpu.md.
#
# $OUT brings back at most 8 files, so these are the 8: summary.txt (nvidia-smi, versions, the
# CPU's flags, then the table), tests.log (pytest -v -rA --tb=long, each failure's traceback
# also appended the moment it happens, so a step cut by its time limit keeps them), tests.xml
# (JUnit), bench_train.log, recipe.log (ending with the run's metrics.jsonl), eval.log,
# bench_decode.log, bench_cpu.log.
#
#   bash scripts/gpu_check.sh --prepare        # here, with network: wheels + Multi30k copy
#   bash scripts/gpu_check.sh [--quick] [--steps tests,bench_train,...] [--wheels DIR]
#                             [--recipe-minutes M] [--recipe-timeout S] [--cpu]
#                             [--tests-k EXPR] [--tests-timeout S]
#
# Steps, in order: setup tests bench_train recipe eval bench_decode bench_cpu (default: all).
# `recipe` trains configs/multi30k_de_en_gpu.yaml for --recipe-minutes of training in total; a
# run stopped by --recipe-timeout saves last.pt (SIGTERM) and the next call resumes it.
# Without a GPU every CUDA step is skipped and the exit status is 0; `--cpu` instead runs
# every step on the CPU at toy sizes, to rehearse the plumbing.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

WHEELS=build/wheels # git-ignored, so `carry` can take it
DATA=data/multi30k  # git-ignored; the configs' default data root
STEPS=setup,tests,bench_train,recipe,eval,bench_decode,bench_cpu
QUICK=0 CPU=0 PREPARE=0 RECIPE_MINUTES=10 RECIPE_TIMEOUT=520 TESTS_K="" TESTS_TIMEOUT=540
GIVEN_MINUTES=0 GIVEN_TIMEOUT=0
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --cpu) CPU=1 ;;
    --prepare) PREPARE=1 ;;
    --steps) STEPS=setup,$2 && shift ;;
    --wheels) WHEELS=$2 && shift ;;
    --recipe-minutes) RECIPE_MINUTES=$2 GIVEN_MINUTES=1 && shift ;;
    --recipe-timeout) RECIPE_TIMEOUT=$2 GIVEN_TIMEOUT=1 && shift ;;
    --tests-k) TESTS_K=$2 && shift ;; # pytest -k: the tests in two calls when one is too short
    --tests-timeout) TESTS_TIMEOUT=$2 && shift ;;
    *) echo "gpu_check: unknown option $1 (see the top of $0)" >&2 && exit 2 ;;
    esac
    shift
done

if [ $PREPARE = 1 ]; then
    # The device has no network: what it lacks travels as wheels for its Python (3.12).
    # Versions pinned to the ones checked here; datasets needs dill and multiprocess too.
    mkdir -p "$WHEELS" "$DATA"
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$WHEELS" \
        datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 ctranslate2==4.8.5 || exit 1
    src=${MT_DATA:-../shared/data/multi30k}
    for f in train val test_2016_flickr; do cp "$src"/$f.de.gz "$src"/$f.en.gz "$DATA"/ || exit 1; done
    du -sh "$WHEELS" "$DATA"
    echo "carry: [\"$WHEELS\", \"$DATA\"]"
    exit 0
fi

OUTDIR=${OUT:-$REPO/runs/gpu_check_out} # the device returns at most 8 files: this writes 8
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/*.log "$OUTDIR"/tests.xml "$OUTDIR"/summary.txt
SUMMARY=$OUTDIR/summary.txt
TABLE=${TMPDIR:-/tmp}/mt_gpu_check_table.$$ # the table rows, appended to summary.txt last
: >"$TABLE"
RUN=runs/gpu_check
# --quick shortens the recipe unless --recipe-minutes / --recipe-timeout say otherwise
[ $QUICK = 1 ] && RUN=runs/gpu_check_quick
[ $QUICK = 1 ] && [ $GIVEN_MINUTES = 0 ] && RECIPE_MINUTES=1
[ $QUICK = 1 ] && [ $GIVEN_TIMEOUT = 0 ] && RECIPE_TIMEOUT=150
export MT_DATA=$REPO/$DATA PYTHONUNBUFFERED=1
SRC=$DATA/test_2016_flickr.de.gz REF=$DATA/test_2016_flickr.en.gz
FAILED=0

note() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$TABLE"; }
wanted() { [[ ",$STEPS," == *",$1,"* ]]; }
# run STEP TIMEOUT CMD...: CMD under `timeout`, its output in STEP.log; sets RC and SECS
run() {
    local step=$1 limit=$2 start=$SECONDS log=$OUTDIR/$1.log
    shift 2
    echo "== $step: $*" | tee -a "$log"
    timeout --preserve-status -k 30 -s TERM "$limit" "$@" >"$log.new" 2>&1
    RC=$? SECS=$((SECONDS - start))
    tail -n 3 "$log.new" && cat "$log.new" >>"$log" && rm "$log.new"
}
# py SCRIPT ARGS...: a one-off python3 snippet that prints a step's key number
py() { python3 -c "$@" 2>/dev/null || echo "?"; }

# -- setup: the GPU, and mt importable (PYTHONPATH: no build step, torch left untouched) ------
start=$SECONDS
LOG=$SUMMARY # the setup's log opens summary.txt
{
    date -u
    nvidia-smi || echo "nvidia-smi: not found"
    lscpu || grep -m1 -E '^(model name|flags)' /proc/cpuinfo
} >"$LOG" 2>&1
SITE=${GPU_SITE:-${TMPDIR:-/tmp}/mt_gpu_site} # GPU_SITE: a folder per job run side by side
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
        "$WHEELS"/*.whl >>"$LOG" 2>&1 || echo "pip install of $WHEELS failed (see summary.txt)" | tee -a "$LOG"
fi
export PYTHONPATH=$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}
GPU=$(py 'import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else "")')
TORCH=$(py 'import torch; print(torch.__version__)')
EXTRAS=$(py '
import importlib
for name in ("datasets", "ctranslate2", "transformers"):
    try:
        print(name, importlib.import_module(name).__version__, end=", ")
    except Exception:
        print(name, "missing", end=", ")' | sed "s/, $//")
if ! python3 -c "import mt.cli, sentencepiece, sacrebleu, typer, yaml, tqdm" >>"$LOG" 2>&1; then
    note setup failed $((SECONDS - start)) "mt does not import (see summary.txt)" && FAILED=1
    STEPS=setup
fi
if [ $CPU = 1 ]; then
    DEVICE=cpu
elif [ -n "$GPU" ] && [ "$GPU" != "?" ]; then
    DEVICE=cuda
else
    DEVICE=none
fi
echo "torch $TORCH; gpu ${GPU:-none}; $EXTRAS; python $(python3 -V 2>&1)" | tee -a "$LOG"
[ $FAILED = 0 ] && note setup ok $((SECONDS - start)) "${GPU:-no GPU}, torch $TORCH; $EXTRAS"
skip() { note "$1" skipped 0 "no CUDA device (torch.cuda.is_available() is False)"; }

# Sizes: a GPU run, a short GPU run (--quick: ~8 min in all), or toy sizes on the CPU (--cpu)
TESTS=()
if [ $DEVICE = cpu ]; then
    BENCH_TRAIN=(--device cpu --batch 8 --length 8 --steps 1 --warmup 1 --rounds 1)
    RECIPE_SET=(--set train.device=cpu --set train.precision=fp32 --set train.max_steps=3
        --set data.max_train_examples=2000 --set data.max_valid_examples=20
        --set tokenizer.vocab_size=1000 --set train.max_tokens=1024 --set train.eval_every=3
        --set train.log_every=1 --set decode.max_len_b=5 --set train.loader_workers=0)
    BENCH_DECODE=(--device cpu --limit 30 --rounds 1 --beams 1)
    BENCH_CPU=(--train-examples 2000 --steps 1 --warmup 1 --rounds 1 --limit 20 --beams 1
        --precisions fp32,auto --dtypes fp32,auto)
elif [ $QUICK = 1 ]; then
    TESTS=(-k "not compile") # torch.compile takes minutes
    BENCH_TRAIN=(--device cuda --batch 256 --length 32 --steps 5 --warmup 3 --rounds 1)
    RECIPE_SET=()
    BENCH_DECODE=(--device cuda --dtype fp16 --limit 300 --rounds 1 --beams 1,5)
    BENCH_CPU=(--steps 4 --warmup 1 --rounds 1 --limit 100)
else
    BENCH_TRAIN=(--device cuda --batch 256 --length 32 --steps 20 --warmup 5 --rounds 3)
    RECIPE_SET=()
    BENCH_DECODE=(--device cuda --dtype fp16 --rounds 2 --beams 1,4,5)
    BENCH_CPU=(--steps 10 --warmup 2 --rounds 2 --limit 500)
fi

# -- tests: pytest -m cuda, and the precision tests on this machine's CPU --------------------
# -v names each test as it runs, -rA --tb=long prints every outcome and whole tracebacks, and
# MT_TEST_FAILURES (tests/conftest.py) appends each failure to tests.log the moment it happens.
if wanted tests; then
    [ -n "$TESTS_K" ] && TESTS=(-k "$TESTS_K")
    MT_TEST_FAILURES=$OUTDIR/tests.log run tests "$TESTS_TIMEOUT" python3 -m pytest -m "cuda or not slow" \
        -v -rA --tb=long --junitxml="$OUTDIR/tests.xml" -p no:cacheprovider "${TESTS[@]}" \
        tests/system/test_cuda.py tests/unit/test_precision.py tests/cli/test_decode_dtype.py
    line=$(grep -E '(passed|failed|skipped|error)' "$OUTDIR/tests.log" | tail -n 1 | tr -d '=')
    if [ $RC = 0 ] && [[ $line == *passed* ]]; then
        note tests ok $SECS "$line"
    elif [ $RC = 0 ] || [ $RC = 5 ]; then
        note tests skipped $SECS "$line"
    else
        note tests failed $SECS "rc $RC: $line" && FAILED=1
    fi
fi

# -- bench_train: mt against HF MarianMT, base shape, fp32 and bf16 ---------------------------
if wanted bench_train; then
    if [ $DEVICE = none ]; then skip bench_train; else
        real=()
        [ -f "$RUN/config.yaml" ] && real=(--run-dir "$RUN" --max-tokens 8192)
        run bench_train 300 python3 -m scripts.bench.train "${BENCH_TRAIN[@]}" "${real[@]}"
        key=$(py '
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.startswith("{") and "mt_mfu" in x]
rows = [r for r in rows if r["precision"] == rows[-1]["precision"]]  # bf16 on a GPU
print(" | ".join("%s %s: mt %.0f tgt tok/s, %.2fx HF, MFU %.1f%%" % (r["precision"],
      r["batches"], r["mt_tgt_tok_s"], r["ratio_mt_over_marian"], 100 * r["mt_mfu"])
      for r in rows))' "$OUTDIR/bench_train.log")
        [ $RC = 0 ] && note bench_train ok $SECS "$key" || { note bench_train failed $SECS "rc $RC" && FAILED=1; }
    fi
fi

# -- recipe: the GPU config for RECIPE_MINUTES of training (resumed if last.pt exists) ---------
if wanted recipe; then
    if [ $DEVICE = none ]; then skip recipe; else
        args=(configs/multi30k_de_en_gpu.yaml --run-dir "$RUN" --set "train.max_minutes=$RECIPE_MINUTES")
        [ -f "$RUN/last.pt" ] && args+=(--resume)
        run recipe "$RECIPE_TIMEOUT" python3 -m mt train "${args[@]}" "${RECIPE_SET[@]}"
        [ -f "$RUN/metrics.jsonl" ] && { echo "== $RUN/metrics.jsonl" && cat "$RUN/metrics.jsonl"; } >>"$OUTDIR/recipe.log"
        key=$(py '
import json, sys, statistics
recs = [json.loads(x) for x in open(sys.argv[1])]
tok = statistics.median([r["tgt_tokens_per_s"] for r in recs if "loss" in r] or [0])
bleu = max([r["dev_bleu"] for r in recs if r.get("dev_bleu") is not None] or [float("nan")])
minutes = max(r.get("elapsed", 0) for r in recs) / 60
print("step %d, %.1f min, %.0f tgt tok/s, best dev BLEU %.2f"
      % (recs[-1]["step"], minutes, tok, bleu))' "$RUN/metrics.jsonl")
        case $RC in
        0) note recipe ok $SECS "$key" ;;
        130 | 143) note recipe paused $SECS "$key; stopped by --recipe-timeout, rerun resumes" ;;
        *) note recipe failed $SECS "rc $RC; $key" && FAILED=1 ;;
        esac
    fi
fi

# -- eval: cased BLEU on test_2016_flickr (beam from the config) ------------------------------
if wanted eval; then
    if [ $DEVICE = none ]; then skip eval; elif ! ls "$RUN"/best.pt >/dev/null 2>&1; then
        note eval skipped 0 "no $RUN/best.pt (run the recipe step first)"
    else
        src=$SRC ref=$REF
        if [ $DEVICE = cpu ]; then # toy sizes: the first 50 lines
            src=$OUTDIR/test50.de ref=$OUTDIR/test50.en
            gzip -cd "$SRC" | head -n 50 >"$src"
            gzip -cd "$REF" | head -n 50 >"$ref"
        fi
        key="" start=$SECONDS ok=0
        for ckpt in best averaged; do
            [ -f "$RUN/$ckpt.pt" ] || continue
            run eval 300 python3 -m mt eval "$RUN/$ckpt.pt" --src "$src" --ref "$ref" --json --device "$DEVICE"
            bleu=$(tail -n 1 "$OUTDIR/eval.log" | py 'import json, sys; print(round(json.loads(sys.stdin.read())["bleu"], 2))')
            [ $RC = 0 ] && ok=1
            key="$key$ckpt.pt BLEU $bleu; "
        done
        rm -f "$OUTDIR/test50.de" "$OUTDIR/test50.en"
        [ $ok = 1 ] && note eval ok $((SECONDS - start)) "$key" || { note eval failed $((SECONDS - start)) "$key" && FAILED=1; }
    fi
fi

# -- bench_decode: mt against HF generate and CTranslate2 on the recipe's checkpoint -----------
# CTranslate2 4.x wheels dlopen CUDA 12's libcublas.so.12 and look each function up by name
# (cublasGemmEx, cublasGemmStridedBatchedEx, ...); the device's image has CUDA 13 only, and a
# cuBLAS 12 wheel (~580 MB) cannot travel. cuBLAS 13 keeps those functions under the same names,
# so a link named libcublas.so.12 to it is tried. bench_decode prints CTranslate2's BLEU and its
# greedy agreement with mt, which show whether the stand-in computes right; if it fails to run,
# bench_decode leaves CTranslate2 out and keeps the other engines' numbers.
has_cublas12() { python3 -c 'import ctypes; ctypes.CDLL("libcublas.so.12")' 2>/dev/null; }
cublas12_link() {
    local dir=${TMPDIR:-/tmp}/mt_cublas12
    CUBLAS13=$(python3 -c '
import glob, os, sys
pats = ("nvidia/cu13/lib/libcublas.so.13*", "nvidia/cublas/lib/libcublas.so.13*")
roots = [p for p in sys.path if os.path.isdir(p)]
hits = [h for r in roots for p in pats for h in glob.glob(os.path.join(r, p))]
hits += glob.glob("/usr/local/cuda*/lib64/libcublas.so.13*") + glob.glob("/usr/lib/x86_64-linux-gnu/libcublas.so.13*")
print(min(hits, key=len) if hits else "")' 2>/dev/null)
    [ -n "$CUBLAS13" ] || return 1
    mkdir -p "$dir" && ln -sf "$CUBLAS13" "$dir/libcublas.so.12" || return 1
    # the real folder too, for the libcublasLt.so.13 that cuBLAS loads beside itself
    export LD_LIBRARY_PATH=$dir:$(dirname "$CUBLAS13")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    has_cublas12
}
if wanted bench_decode; then
    ckpt=$RUN/averaged.pt
    [ -f "$ckpt" ] || ckpt=$RUN/best.pt
    if [ $DEVICE = none ]; then skip bench_decode; elif [ ! -f "$ckpt" ]; then
        note bench_decode skipped 0 "no $RUN/best.pt (run the recipe step first)"
    else
        engines=mt,hf,ct2 why=""
        if [ $DEVICE = cuda ]; then
            if ! python3 -c 'import ctranslate2' 2>/dev/null; then
                engines=mt,hf why="; ct2 left out: ctranslate2 does not import"
            elif ! has_cublas12 && cublas12_link; then
                why="; ct2 through libcublas.so.12 -> $CUBLAS13 (check its BLEU and greedy agreement)"
            elif ! has_cublas12; then
                engines=mt,hf why="; ct2 left out: no libcublas.so.12, and no cuBLAS 13 to stand in"
            fi
        fi
        run bench_decode 420 python3 -m scripts.bench.decode "$ckpt" --src "$SRC" --ref "$REF" \
            --engines "$engines" "${BENCH_DECODE[@]}"
        key=$(grep -E '^mt(-early)? / ' "$OUTDIR/bench_decode.log" | paste -sd ';' | sed 's/;/; /g')
        [ $RC = 0 ] && note bench_decode ok $SECS "$key$why" || { note bench_decode failed $SECS "rc $RC$why" && FAILED=1; }
    fi
fi

# -- bench_cpu: bf16 against fp32 on the device's own CPU (scripts/bench/bf16.py) -----------
# The issue's CPU targets need native bf16 (avx512_bf16 or AMX): the host of a lent GPU may
# have it where the project's 2-core machine does not. Training always; decoding on the
# recipe's checkpoint when there is one (CTranslate2 int8 beside it when it imports).
if wanted bench_cpu; then
    if [ $DEVICE = none ]; then skip bench_cpu; else
        ckpt=$RUN/averaged.pt
        [ -f "$ckpt" ] || ckpt=$RUN/best.pt
        decode=(--skip-decode)
        [ -f "$ckpt" ] && decode=(--checkpoint "$ckpt")
        run bench_cpu 420 python3 -m scripts.bench.bf16 "${decode[@]}" "${BENCH_CPU[@]}"
        key=$(grep -E '^(train|decode) ' "$OUTDIR/bench_cpu.log" | sed -E 's/ +/ /g' | paste -sd ';' | sed 's/;/; /g')
        [ $RC = 0 ] && note bench_cpu ok $SECS "$key" || { note bench_cpu failed $SECS "rc $RC" && FAILED=1; }
    fi
fi

echo
echo "gpu_check: device $DEVICE, logs in $OUTDIR"
{ echo && printf 'step\tstatus\tseconds\tkey number\n' && cat "$TABLE"; } |
    awk -F'\t' '{ printf "%-13s %-8s %7s  %s\n", $1, $2, $3, $4 }' | tee -a "$SUMMARY"
rm -f "$TABLE"
n=$(find "$OUTDIR" -type f | wc -l)
[ "$n" -le 8 ] || echo "gpu_check: $n files in $OUTDIR; the device brings back 8" | tee -a "$SUMMARY"
exit $FAILED
