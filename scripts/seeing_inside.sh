#!/usr/bin/env bash
# The pictures and numbers of docs/seeing-inside.md, from one checkpoint:
#   bash scripts/seeing_inside.sh runs/multi30k_de_en/best.pt [OUT_DIR]   (default docs/)
# Needs the [plot] extra; the viewer screenshots also need chromium and selenium ([test]).
set -euo pipefail
CKPT=$1
OUT=${2:-docs}
S=docs/studies/seeing-inside
J=$(mktemp -d)  # the --json outputs: the numbers below come from them
mkdir -p "$OUT"
mt attention "$CKPT" --src "Ein Hund rennt durch den Schnee." -o "$OUT/attention_de_en.png" \
    --html "$OUT/attention_de_en.html"
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    python -m scripts.tools.screenshot "$OUT/attention_de_en.html" "$OUT/viewer_de_en.png" \
        --select Attention=cross --hover 2,3 --size 900,900
fi
for w in decke tor; do
    W="$(tr '[:lower:]' '[:upper:]' <<< "${w:0:1}")${w:1}"
    mt vectors "$CKPT" --word "$W" --input "$S/$w.de" --centre -o "$OUT/vectors_$w.png" \
        --json > "$J/$w.json"
    echo "== $W ($S/$w.de)"
    python -m scripts.studies.sense_separation "$J/$w.json" --first 3
done
for w in decke tor bank; do
    W="$(tr '[:lower:]' '[:upper:]' <<< "${w:0:1}")${w:1}"
    mt vectors "$CKPT" --word "$W" --input "$S/${w}_pairs.de" --centre \
        -o "$OUT/vectors_${w}_pairs.png" --json > "$J/${w}_pairs.json"
    echo "== $W ($S/${w}_pairs.de)"
    python -m scripts.studies.sense_separation "$J/${w}_pairs.json" --first 2
    mt translate "$CKPT" < "$S/${w}_pairs.de"
done
mt vectors "$CKPT" --word Decke --input "$S/decke.de" --centre --html "$OUT/vectors_decke.html" \
    > /dev/null
