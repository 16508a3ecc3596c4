# Sourced (not run) by benchmarks/gpu_session.sh, gpu_continue.sh, gpu_grow.sh and gpu_session_62.sh, after each
# sets DEV, OUT and PY: the clock and log every step line goes through, the scratch folder $R, the shared data
# unpacked from the carried .devdata where a lent device machine has no ../shared/data, what machine and software
# ran, and the seven pretraining corpora of the shipped minis as train flags ($CORPORA).
#
# Where ../shared/data is not beside the checkout (a lent device machine gets only the repository), pack it first,
# into a folder git ignores, and carry .devdata with the call:
#   echo /.devdata/ >> .git/info/exclude; mkdir -p .devdata
#   tar czf .devdata/data.tar.gz -C ../shared data/README.md data/brown data/wikitext-2 data/tinyshakespeare \
#       data/movie_reviews data/state_union data/news data/movie_plots data/sentence_polarity data/ag_news
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
R=/tmp/r; rm -rf $R; mkdir -p $R $OUT
log() { echo "[$(el)s] $*" | tee -a $OUT/steps.log; }
# (gpu_session_62.sh needs one file only: it carries .devdata/wikitext-2-valid.txt.xz and no data.tar.gz.)
if [ ! -d ../shared/data ] && [ -f .devdata/data.tar.gz ]; then mkdir -p ../shared && tar xzf .devdata/data.tar.gz -C ../shared; fi
log "data $(du -sh ../shared/data 2>/dev/null | cut -f1)"
if [ "$DEV" = cuda ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a $OUT/steps.log
fi
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'transformers', transformers.__version__)" 2>&1 | tee -a $OUT/steps.log
D=../shared/data
# After the pretraining runs a script started in the background (logs in $R/NAME.log): wait for them, log each one's
# last lines, write the shipped mini's held-out text to $R/heldout.txt, and set LIM, the seconds left before END less
# MARGIN, at least 20.  Usage: pretraining_done MARGIN NAME...
pretraining_done() {
  local margin=$1; shift
  wait
  for m in "$@"; do tail -c 400 $R/$m.log | tr '\r' '\n' | tail -3 >> $OUT/steps.log; done
  log "pretraining done"
  $PY -m bert_core heldout --checkpoint checkpoints/bert-mini-english --out $R/heldout.txt > /dev/null
  LIM=$(( END - margin - $(el) )); [ $LIM -lt 20 ] && LIM=20
}
CORPORA="--corpus brown --corpus $D/wikitext-2/valid.txt --corpus tinyshakespeare --corpus $D/movie_reviews/reviews.txt
 --corpus $D/state_union/addresses.txt --corpus $D/news/abc.txt --corpus $D/movie_plots/plots.txt"
