#!/bin/bash
# One GPU session of issue #28 in one command (docs/benchmarks.md, "A mini pretrained on a GPU"): smoke checks of
# every CUDA path, the CUDA tests, the mini BERT (dropout 0 and 0.1) and its GPT twin grown from the shipped tiny
# models and pretrained at once for TB seconds, their held-out scores, the issue's fine-tuning protocol (3 seeds,
# both tasks) on the better BERT, then `bench` against transformers in bf16 with whatever time is left before END.
# Results land in $OUT (at most 8 files: the folders are tarred and split into 15 MB parts).
#
# The lent machine gets the repository, not ../shared/data: pack it as benchmarks/gpu_common.sh says and carry
# .devdata.
# On a GPU: OUT=out bash benchmarks/gpu_session.sh (TB=280 END=575 by default: 2026-11-26 on an H200 it ended at
# 467 s). A CPU dry run of the flow: DEV=cpu TB=8 FT_STEPS=5 OUT=/tmp/out bash benchmarks/gpu_session.sh
DEV=${DEV:-cuda}; TB=${TB:-280}; FT_STEPS=${FT_STEPS:-1500}; END=${END:-575}
PY=${PY:-python3}
. "$(dirname "$0")/gpu_common.sh"
must() { local name=$1; shift; "$@" > $R/$name.out 2> $R/$name.err || { log "FAILED $name"; tail -30 $R/$name.err | tee -a $OUT/steps.log; cp $R/*.err $OUT/ 2>/dev/null; exit 3; }; }
must smoke_train $PY -m bert_core train --corpus toy --preset nano --steps 30 --device $DEV --out $R/smoke --json
must smoke_ft $PY -m bert_core finetune --checkpoint $R/smoke --task toy --steps 20 --device $DEV --json
must smoke_heldout $PY -m bert_core heldout --checkpoint $R/smoke --out $R/smoke-heldout.txt
must smoke_eval $PY -m bert_core eval --checkpoint $R/smoke --text-file $R/smoke-heldout.txt --batches 2 --device $DEV --json
must grow_bert $PY -m bert_core grow --checkpoint checkpoints/bert-tiny-english --preset mini --out $R/grown-bert
must grow_gpt $PY -m bert_core grow --checkpoint checkpoints/gpt-tiny-english --preset mini --out $R/grown-gpt
log "smoke ok"
if [ "$DEV" = cuda ]; then
  timeout 150 $PY -m pytest -o addopts="" -q -p no:cacheprovider tests/test_recipes.py -k cuda tests/test_bench.py > $R/gpu-tests.out 2>&1
  log "gpu tests rc=$? $(tail -1 $R/gpu-tests.out)"
fi
A="$CORPORA --seq-len 128 --short-seq-len 64 --short-seq-fraction 0.3 --batch-size 128 --lr 1e-3 --schedule wsd --warmup 0.02 --time-budget $TB --checkpoint-every 90 --eval-every 1000 --device $DEV"
echo "$A" > $R/pretrain-args.txt
timeout $(( TB + 150 )) $PY -m bert_core train $A --dropout 0 --init-from $R/grown-bert --out $R/bert-d0 --json > $R/bert-d0.json 2> $R/bert-d0.log &
timeout $(( TB + 150 )) $PY -m bert_core train $A --dropout 0.1 --init-from $R/grown-bert --out $R/bert-d1 --json > $R/bert-d1.json 2> $R/bert-d1.log &
timeout $(( TB + 150 )) $PY -m bert_core train $A --dropout 0 --objective clm --init-from $R/grown-gpt --out $R/gpt-d0 --json > $R/gpt-d0.json 2> $R/gpt-d0.log &
wait
for m in bert-d0 bert-d1 gpt-d0; do tail -c 600 $R/$m.log | tr '\r' '\n' | tail -4 >> $OUT/steps.log; done
log "pretraining done"
# The better BERT by its own held-out masked-token accuracy (the trainer's final evaluation).
BEST=$($PY - <<'PY'
import json
best = None
for m in ("bert-d0", "bert-d1"):
    try:
        r = json.load(open(f"/tmp/r/{m}.json"))
    except Exception:
        continue
    acc = (r.get("heldout") or {}).get("masked_token_accuracy") or 0
    print(m, acc, file=open("/tmp/r/best.txt", "a"))
    if best is None or acc > best[1]:
        best = (m, acc)
print(best[0] if best else "bert-d0")
PY
)
log "best $BEST; $(cat $R/best.txt | tr '\n' ' ')"
LIM=$(( END - 75 - $(el) )); [ $LIM -lt 20 ] && LIM=20
# The held-out documents of the seven corpora (the same split in every run: seed 0), as one text file
$PY -m bert_core heldout --checkpoint $R/bert-d0 --out $R/heldout.txt > $R/heldout.out 2>&1
for m in bert-d0 bert-d1 gpt-d0; do
  timeout $LIM $PY -m bert_core eval --checkpoint $R/$m --text-file $R/heldout.txt --seq-len 128 --device $DEV --json > $R/$m-eval.json 2>&1 &
done
for task in polarity ag_news; do for s in 0 1 2; do
  timeout $LIM $PY -m bert_core finetune --checkpoint $R/$BEST --task $task --val-size 300 --steps $FT_STEPS --seed $s --device $DEV --json > $R/ft-$BEST-$task-$s.json 2> $R/ft-$BEST-$task-$s.err &
done; done
wait
log "evaluations done"
cd $R
tar czf $OUT/results.tar.gz *.json *.log *.err *.out *.txt 2>/dev/null
for m in bert-d0 bert-d1 gpt-d0; do
  [ -f $m/model.safetensors ] || continue
  tar cf - $m/config.json $m/model.safetensors $m/tokenizer.json $m/tokenizer_config.json $m/special_tokens_map.json $m/vocab.txt $m/trainer_state.json $m/metrics.json 2>/dev/null | gzip -1 > $R/$m.tgz
done
cd - > /dev/null
# Up to 8 files of at most 16 MiB come back: the two chosen folders, split.
for m in $BEST gpt-d0; do [ -f $R/$m.tgz ] && split -b 15M -d $R/$m.tgz $OUT/$m.tgz.; done
log "packed $(ls $OUT | tr '\n' ' ')"
left=$(( END - $(el) ))
if [ "$DEV" = cuda ] && [ $left -gt 40 ]; then
  timeout $(( left - 5 )) bash -c "$PY -m bert_core bench --device cuda --preset mini --batch-size 128 --rounds 20 --warmup 5 --json >> $OUT/bench.jsonl; $PY -m bert_core bench --device cuda --preset base --batch-size 64 --rounds 10 --warmup 3 --json >> $OUT/bench.jsonl; $PY -m bert_core bench --device cuda --preset base --seq-len 512 --batch-size 16 --rounds 10 --warmup 3 --json >> $OUT/bench.jsonl" 2>> $OUT/steps.log
fi
log "end"
