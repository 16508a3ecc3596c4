#!/bin/bash
# A second GPU session of issue #28 in one command: continue the mini BERT and GPT that gpu_session.sh made
# (runs/gpu-bert-mini, runs/gpu-gpt-mini), at 128 tokens, at batch 128 and at batch 512 (on a GPU a mini step is
# launch-bound, so the larger batch costs little time a step), four runs at once for TB seconds; keep the BERT with
# the better held-out masked-token accuracy and the GPT trained the same way; then the issue's fine-tuning protocol
# (3 seeds, both tasks) on that BERT with fine-tuning dropout 0.1, alone and with each lever (mean pooling,
# layer-wise lr decay 0.8). Results land in $OUT (at most 8 files).
#
# Pack what the lent machine lacks into .devdata (git ignores it; the working tree and what is carried travel
# together, at most 64 MiB, so the two start models go as bf16: 11 MB each):
#   tar czf .devdata/data.tar.gz -C ../shared data/...   (see gpu_session.sh)
#   python -m bert_core heldout --checkpoint runs/gpu-bert-mini --out .devdata/mini-heldout.txt
#   .devdata/start/{bert,gpt}: the folders' config and tokenizer files, model.safetensors cast to bf16
# On a GPU: OUT=out bash benchmarks/gpu_continue.sh. A CPU dry run: DEV=cpu TB=8 FT_STEPS=5 OUT=/tmp/out bash ...
set -u
export PYTHONUNBUFFERED=1
DEV=${DEV:-cuda}; TB=${TB:-330}; FT_STEPS=${FT_STEPS:-1500}; END=${END:-540}
PY=${PY:-python3}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=/tmp/r; rm -rf $R; mkdir -p $R $OUT
log() { echo "[$(el)s] $*" | tee -a $OUT/steps.log; }
if [ ! -d ../shared/data ]; then mkdir -p ../shared && tar xzf .devdata/data.tar.gz -C ../shared; fi
log "data $(du -sh ../shared/data | cut -f1)"
if [ "$DEV" = cuda ]; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a $OUT/steps.log; fi
C="--corpus brown --corpus ../shared/data/wikitext-2/valid.txt --corpus tinyshakespeare --corpus ../shared/data/movie_reviews/reviews.txt --corpus ../shared/data/state_union/addresses.txt --corpus ../shared/data/news/abc.txt --corpus ../shared/data/movie_plots/plots.txt"
A="$C --seq-len 128 --short-seq-len 0 --lr 1e-3 --schedule wsd --warmup 0.02 --dropout 0 --time-budget $TB --checkpoint-every 120 --eval-every 1000 --device $DEV"
echo "$A" > $R/pretrain-args.txt
for b in 128 512; do
  timeout $(( TB + ${SLACK:-150} )) $PY -m bert_core train $A --batch-size $b --init-from .devdata/start/bert --out $R/bert-b$b --json > $R/bert-b$b.json 2> $R/bert-b$b.log &
  timeout $(( TB + ${SLACK:-150} )) $PY -m bert_core train $A --batch-size $b --objective clm --init-from .devdata/start/gpt --out $R/gpt-b$b --json > $R/gpt-b$b.json 2> $R/gpt-b$b.log &
done
wait
for m in bert-b128 bert-b512 gpt-b128 gpt-b512; do tail -c 400 $R/$m.log | tr '\r' '\n' | tail -3 >> $OUT/steps.log; done
log "pretraining done"
B=$($PY - <<'PY'
import json
best = None
for b in (128, 512):
    try:
        acc = json.load(open(f"/tmp/r/bert-b{b}.json"))["heldout"]["masked_token_accuracy"]
    except Exception:
        continue
    print(b, acc, file=open("/tmp/r/best.txt", "a"))
    if best is None or acc > best[1]:
        best = (b, acc)
print(best[0] if best else 128)
PY
)
log "best batch $B; $(tr '\n' ' ' < $R/best.txt)"
LIM=$(( END - 40 - $(el) )); [ $LIM -lt 20 ] && LIM=20
for m in bert-b128 bert-b512 gpt-b128 gpt-b512; do
  timeout $LIM $PY -m bert_core eval --checkpoint $R/$m --text-file .devdata/mini-heldout.txt --seq-len 128 --device $DEV --json > $R/$m-eval.json 2>&1 &
done
declare -A V=([d1]="--dropout 0.1" [d1mean]="--dropout 0.1 --pooling mean" [d1ld]="--dropout 0.1 --layer-decay 0.8")
for v in d1 d1mean d1ld; do for task in polarity ag_news; do for s in 0 1 2; do
  timeout $LIM $PY -m bert_core finetune --checkpoint $R/bert-b$B --task $task --val-size 300 --steps $FT_STEPS --seed $s ${V[$v]} --device $DEV --json > $R/ft-$v-$task-$s.json 2> $R/ft-$v-$task-$s.err &
done; done; done
wait
log "evaluations done"
cd $R
tar czf $OUT/results.tar.gz *.json *.log *.err *.txt 2>/dev/null
for m in bert-b$B gpt-b$B; do
  [ -f $m/model.safetensors ] || continue
  tar cf - $m/config.json $m/model.safetensors $m/tokenizer.json $m/tokenizer_config.json $m/special_tokens_map.json $m/vocab.txt $m/trainer_state.json $m/metrics.json 2>/dev/null | gzip -1 > $R/$m.tgz
  split -b 15M -d $R/$m.tgz $OUT/$m.tgz.
done
cd - > /dev/null
log "packed $(ls $OUT | tr '\n' ' ')"
