#!/bin/bash
# Issue #62 ("The GPU at its limit") in one device call (docs/benchmarks.md, "The GPU at its limit"):
#  1. `bench --device cuda` against transformers, bf16, eager and compiled (--compile default | reduce-overhead, the
#     latter CUDA graphs), mini, small and base at 128 and 512 tokens, most wanted first, each its own process, until
#     BENCH_S seconds into the call: tokens/s, speed-up, useful FLOP/s as a share of the card's measured bf16 matmul
#     and of its datasheet peak, compile time apart from step time -> $OUT/bench.jsonl (one JSON object a run);
#  2. the GPU ladder: every preset trained with its recipe on WikiText-2's validation split (the CPU ladder's text)
#     for the same budget, one after another, [MASK] accuracy on its held-out documents through each run ->
#     $OUT/ladder.json (benchmarks/gpu_ladder.py; the budget a size is what is left before END, shared evenly, at
#     most 90 s);
#  3. with a minute left, the compile and bench tests on CUDA.
# Then, on the CPU machine: benchmarks/bench_table.py FILES_AT/bench.jsonl prints the table for docs/benchmarks.md,
# and benchmarks/gpu_ladder.py --from FILES_AT/ladder.json --plot docs/preset-ladder-gpu.png draws the ladders.
#
# The lent machine gets the repository only: carry the one text file the ladder reads, packed into .devdata/ (which
# .gitignore lists; 0.3 MB):
#   mkdir -p .devdata && xz -9 -c ../shared/data/wikitext-2/valid.txt > .devdata/wikitext-2-valid.txt.xz
# On a GPU (one call, carry [".devdata"], timeout_s 600): OUT=$OUT bash benchmarks/gpu_session_62.sh
# A CPU dry run of the flow (2026-11-28: to its end in 386 s on the busy 2-core VM; docs/benchmarks.md):
#   DEV=cpu PY=.venv/bin/python VOCAB=300 BENCH_CONFIGS="nano 16 2 off;nano 16 2 default" BENCH_S=400 ROUNDS=2 \
#   WARMUP=1 PRESETS=nano,tiny END=700 SETUP_S=40 OUT=/tmp/out62 bash benchmarks/gpu_session_62.sh
DEV=${DEV:-cuda}; END=${END:-530}; BENCH_S=${BENCH_S:-230}; PY=${PY:-python3}
PRESETS=${PRESETS:-nano,tiny,mini,small,medium,base}; ROUNDS=${ROUNDS:-15}; WARMUP=${WARMUP:-5}; VOCAB=${VOCAB:-30522}
# Seconds a ladder size takes beyond its budget: a process start, CUDA, the tokenizer trained on 1.1 MB, scoring.
SETUP_S=${SETUP_S:-20}
# "preset seq batch compile" a run, separated by ";", in the order they are worth: the issue's targets first (mini
# and base at 128 tokens), the launch-bound mini's CUDA graphs before the rest.
BENCH_CONFIGS=${BENCH_CONFIGS:-"mini 128 128 off;mini 128 128 reduce-overhead;base 128 64 off;base 128 64 default;\
mini 128 128 default;base 128 64 reduce-overhead;base 512 16 off;base 512 16 default;small 128 128 off;\
small 128 128 default;mini 512 32 off;small 512 32 off;mini 512 32 default;small 512 32 default"}
. "$(dirname "$0")/gpu_common.sh"
IFS=';' read -ra RUNS <<< "$BENCH_CONFIGS"
for run in "${RUNS[@]}"; do
  read -r preset seq batch mode <<< "$run"
  [ -n "$preset" ] || continue
  left=$(( BENCH_S - $(el) ))
  if [ $left -lt 20 ]; then log "bench: no time left for $run"; continue; fi
  timeout $left $PY -m bert_core bench --device $DEV --preset $preset --seq-len $seq --batch-size $batch \
    --vocab-size $VOCAB --rounds $ROUNDS --warmup $WARMUP --compile $mode --json > $R/bench.out 2>> $R/bench.err
  rc=$?
  cat $R/bench.out >> $OUT/bench.jsonl
  said='"speedup": [0-9.]*\|"ours_fraction_of_matmul": [0-9.]*\|"ours_compile_s": [0-9.]*'
  log "bench $run: rc=$rc $(grep -o "$said" $R/bench.out | tr '\n' ' ')"
done
n=$(echo "$PRESETS" | tr ',' '\n' | grep -c .)
TB=${TB:-$(( (END - $(el) - n * SETUP_S) / n ))}; [ $TB -gt 90 ] && TB=90; [ $TB -lt 10 ] && TB=10
log "ladder: $PRESETS, ${TB} s each"
timeout $(( END - $(el) + 30 )) $PY benchmarks/gpu_ladder.py --device $DEV --presets $PRESETS --budget $TB \
  --slack $(( SETUP_S * 3 )) --out $OUT/ladder.json 2> $R/ladder.err
log "ladder rc=$? $(grep -c '"preset"' $OUT/ladder.json 2>/dev/null) rows"
tail -c 2000 $R/ladder.err >> $OUT/steps.log
left=$(( END + 40 - $(el) ))
if [ "$DEV" = cuda ] && [ $left -gt 60 ]; then
  timeout $left $PY -m pytest -o addopts="" -q -p no:cacheprovider tests/test_compile.py tests/test_bench.py \
    > $R/gpu-tests.out 2>&1
  log "gpu tests rc=$? $(tail -1 $R/gpu-tests.out)"
fi
grep -v '^\s*$' $R/bench.err 2>/dev/null | grep -iv 'warn' | tail -40 > $OUT/bench-errors.txt
log "end"
