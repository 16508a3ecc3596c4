#!/usr/bin/env bash
# The long pretraining of issue "A model that has read thirty times more", in the background on a CPU: the shipped
# bert-mini-english (or the GPT twin, KIND=gpt) continued on a `corpus build` folder, checkpointed every 10 minutes,
# resumed exactly by running this script again (`train --resume`: the same shard position, masks and schedule).
#
#   CORPUS=/work/corpus/v1 RUN=/work/runs/bert-mini-mixed bash benchmarks/pretrain_on_corpus.sh &
#
# SHARE (default 0.5) of the batches come from the shards, the rest from the shared text the mini was trained on
# (its held-out documents stay out): on the corpus alone it lost 2.6 points on Brown and 5.0 on WikiText-2 in 2,136
# steps (docs/corpus.md). SHARE=1 reads the shards alone. It runs at low priority on THREADS threads (default 1) so
# that the machine stays usable. STEPS is the length of the whole run: the wsd schedule holds its rate until the
# last 20% of it, so a run stopped early (the session ended) has lost nothing, and a resume with a larger STEPS
# simply goes on.
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=${CORPUS:?set CORPUS to a corpus build folder}
RUN=${RUN:?set RUN to the run folder}
KIND=${KIND:-bert}
SHARE=${SHARE:-0.5}
THREADS=${THREADS:-1}
STEPS=${STEPS:-200000}
PY=${PY:-.venv/bin/python}
S=../shared/data
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

if [ -f "$RUN/trainer_state.json" ]; then
  exec nice -n 10 "$PY" -m bert_core train --resume "$RUN" --steps "$STEPS"
fi
case $KIND in
  bert) START=checkpoints/bert-mini-english; OBJECTIVE=(--seq-len 256 --batch-size 32) ;;
  gpt) START=checkpoints/gpt-mini-english; OBJECTIVE=(--objective clm --seq-len 128 --batch-size 64) ;;
  *) echo "error: KIND must be bert or gpt, got $KIND" >&2; exit 2 ;;
esac
# The text the shipped minis were trained on (their metrics.json), split with the same seed as theirs.
TEXT=(--corpus brown --corpus $S/wikitext-2/valid.txt --corpus tinyshakespeare --corpus $S/movie_reviews/reviews.txt
      --corpus $S/state_union/addresses.txt --corpus $S/news/abc.txt --corpus $S/movie_plots/plots.txt
      --shard-share "$SHARE")
if [ "$SHARE" = 1 ]; then TEXT=(); fi
# The shipped minis' last phase (docs/shipped-model.md): 5e-4, wsd, dropout 0; 8,192 tokens a step as it had;
# a warmup of 100 steps (the weights are trained already: only the new optimizer state needs it).
exec nice -n 10 "$PY" -m bert_core train --corpus "shards:$CORPUS" "${TEXT[@]}" --init-from "$START" \
  "${OBJECTIVE[@]}" --short-seq-len 0 --lr 5e-4 --schedule wsd --warmup 0.0005 --dropout 0 --steps "$STEPS" \
  --eval-every 250 --eval-batches 20 --checkpoint-every 600 --device cpu --out "$RUN"
