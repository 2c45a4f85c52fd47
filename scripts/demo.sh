#!/usr/bin/env bash
# The main job on the default (tiny) config: train on Multi30k de-en, translate, evaluate.
# MT_DATA names the Multi30k folder (default: data/multi30k). Takes about a minute on 2 CPU cores.
set -euo pipefail
export MT_DATA="${MT_DATA:-data/multi30k}"
run="${RUN_DIR:-runs/demo}"
if [ -e "$run/last.pt" ]; then
  echo "demo: $run already holds a run; resuming it" >&2
  mt train configs/tiny.yaml --run-dir "$run" --resume
else
  mt train configs/tiny.yaml --run-dir "$run"
fi
echo "--- translate (3 input lines, the middle one empty)"
printf 'Ein Mann fährt Fahrrad.\n\nZwei Hunde spielen im Schnee.\n' | mt translate "$run/best.pt"
echo "--- evaluate on test_2016_flickr"
mt eval "$run/best.pt" --src "$MT_DATA/test_2016_flickr.de.gz" --ref "$MT_DATA/test_2016_flickr.en.gz"
