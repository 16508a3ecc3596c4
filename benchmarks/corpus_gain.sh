#!/usr/bin/env bash
# The gain from the corpus alone (issue "A model that has read thirty times more"; docs/benchmarks.md): the shipped
# tiny's two-stage recipe by steps, so every side reads the same tokens, on the tiny's own text (shared), on a
# `corpus build` folder's shards (corpus), and on both at half the batches each (mixed); then each model's held-out
# masked-token accuracy on Brown's held-out documents, WikiText-2 test and the corpus's own held-out text.
#
#   CORPUS=corpus-v1 OUT=runs/gain WIKITEXT_TEST=wikitext-2/test.txt bash benchmarks/corpus_gain.sh
#
# One thread a run, the three side by side (about 45 minutes each on a 2-core VM). Brown's held-out documents come
# from `heldout --corpus brown` of the shipped mini (the same seed-0 split as the tiny's).
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=${CORPUS:?set CORPUS to a corpus build folder}
OUT=${OUT:?set OUT to a folder for the runs}
WIKITEXT_TEST=${WIKITEXT_TEST:?set WIKITEXT_TEST to the WikiText-2 test text}
PY=${PY:-.venv/bin/python}
S=../shared/data
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$OUT"
TEXT=(--corpus brown --corpus $S/wikitext-2/valid.txt --corpus tinyshakespeare)
ONE=(--preset tiny --tokenizer "$CORPUS/tokenizer" --dropout 0 --initializer-range 0.1 --seq-len 32 --short-seq-len 0
     --batch-size 64 --lr 2e-3 --no-nsp --steps 9000 --checkpoint-every 600 --eval-every 1000 --device cpu --seed 0)
TWO=(--dropout 0 --seq-len 128 --short-seq-len 0 --batch-size 16 --lr 1e-3 --warmup 0.05 --steps 11000
     --checkpoint-every 600 --eval-every 1000 --device cpu --seed 0)
side() {  # name, then its corpus options
  local name=$1; shift
  nice -n 10 "$PY" -m bert_core train "$@" "${ONE[@]}" --out "$OUT/$name-s32" > "$OUT/$name-1.log" 2>&1 &&
  nice -n 10 "$PY" -m bert_core train "$@" --init-from "$OUT/$name-s32" "${TWO[@]}" --out "$OUT/$name" \
    > "$OUT/$name-2.log" 2>&1
}
side shared "${TEXT[@]}" &
side corpus --corpus "shards:$CORPUS" &
side mixed --corpus "shards:$CORPUS" "${TEXT[@]}" --shard-share 0.5 &
wait
"$PY" -m bert_core heldout --checkpoint checkpoints/bert-mini-english --corpus brown --out "$OUT/brown-heldout.txt"
H=$CORPUS/heldout
cat "$H"/reuters.txt "$H"/bbc.txt "$H"/newsgroups.txt > "$OUT/news-heldout.txt"
for run in shared corpus mixed; do
  for f in "$OUT/brown-heldout.txt" "$WIKITEXT_TEST" "$H/gutenberg.txt" "$OUT/news-heldout.txt"; do
    printf '%s\t%s\t' "$run" "$(basename "$f")"
    "$PY" -m bert_core eval --checkpoint "$OUT/$run" --text-file "$f" --seq-len 128 --seed 0 --batches 200 --json |
      "$PY" -c "import json, sys; d = json.load(sys.stdin); print(f\"{d['masked_token_accuracy']:.2%}\t{d['perplexity']:.1f}\")"
  done
done
