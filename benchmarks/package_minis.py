"""Package the GPU-pretrained minis as shipped: runs/gpu-bert-mini-2 and runs/gpu-gpt-mini (the folders that
benchmarks/gpu_session.sh and gpu_continue.sh brought back) -> checkpoints/{bert,gpt}-mini-english.

bf16 weights, config.json's dropout set to BERT's fine-tuning 0.1 (they pretrained at 0: metrics.json records it),
the commands rewritten with repository paths, both phases recorded, and the reproducible "eval" section recomputed
on the shipped weights (run from the repository root with ../shared/data beside it; about a minute on a CPU):
    PYTHONPATH=. python benchmarks/package_minis.py
docs/shipped-model.md, "The mini models, pretrained on a GPU"."""
import json
import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bert_core.training.heldout import update_metrics

C7 = ("--corpus brown --corpus ../shared/data/wikitext-2/valid.txt --corpus tinyshakespeare "
      "--corpus ../shared/data/movie_reviews/reviews.txt --corpus ../shared/data/state_union/addresses.txt "
      "--corpus ../shared/data/news/abc.txt --corpus ../shared/data/movie_plots/plots.txt")
PH1 = (f"python -m bert_core train {C7} --seq-len 128 --short-seq-len 64 --short-seq-fraction 0.3 --batch-size 128 "
       "--lr 1e-3 --schedule wsd --warmup 0.02 --time-budget 280 --checkpoint-every 90 --eval-every 1000 "
       "--device cuda --dropout 0")
PH2 = (f"python -m bert_core train {C7} --seq-len 128 --short-seq-len 0 --lr 1e-3 --schedule wsd --warmup 0.02 "
       "--dropout 0 --time-budget 330 --checkpoint-every 120 --eval-every 1000 --device cuda --batch-size 128")
PLAN = {
    "bert-mini-english": ("runs/gpu-bert-mini-2", [
        "python -m bert_core grow --checkpoint checkpoints/bert-tiny-english --preset mini --out runs/grown-bert-mini",
        f"{PH1} --init-from runs/grown-bert-mini --out runs/gpu-bert-mini",
        f"{PH2} --init-from runs/gpu-bert-mini --out runs/bert-mini-english"], "runs/gpu-bert-mini"),
    "gpt-mini-english": ("runs/gpu-gpt-mini", [
        "python -m bert_core grow --checkpoint checkpoints/gpt-tiny-english --preset mini --out runs/grown-gpt-mini",
        f"{PH1} --objective clm --init-from runs/grown-gpt-mini --out runs/gpt-mini-english"], None),
}
FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "trainer_state.json")
for name, (src, commands, phase1) in PLAN.items():
    src, out = Path(src), Path("checkpoints") / name
    out.mkdir(parents=True, exist_ok=True)
    for f in FILES:
        shutil.copy(src / f, out / f)
    sd = load_file(src / "model.safetensors")
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}, out / "model.safetensors",
              metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = 0.1
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    m = json.loads((src / "metrics.json").read_text())
    m["commands"] = commands
    m.pop("eval", None)   # recomputed on the shipped bf16 weights below
    m["pretraining_dropout"] = 0.0
    m["packaging"] = (
        "Pretrained on one NVIDIA H200 with dropout 0 (train_config); then packaged: weights cast to bf16 (they load "
        "in float32 here, and as bf16 or float32 in transformers), and config.json's hidden and attention dropout "
        "set to BERT's fine-tuning 0.1, which is what `finetune` and transformers' from_pretrained take from the "
        "folder (docs/benchmarks.md, 'A mini pretrained on a GPU'). 'heldout' and 'per_corpus' are the trainer's "
        "final evaluation in float32 on the GPU; 'eval' was run on the shipped folder on a CPU.")
    if phase1:
        p1 = json.loads((Path(phase1) / "metrics.json").read_text())
        m["phases"] = [{"steps": p1["steps"], "tokens_seen": p1["tokens_seen"],
                        "training_time_s": p1["training_time_s"], "heldout": p1["heldout"]},
                       {"steps": m["steps"], "tokens_seen": m["tokens_seen"],
                        "training_time_s": m["training_time_s"], "heldout": m["heldout"]}]
    (out / "metrics.json").write_text(json.dumps(m, indent=1) + "\n")
    state = json.loads((out / "trainer_state.json").read_text())
    state["metadata"]["commands"] = commands[-1:]
    state["metadata"]["init_from"]["folder"] = re.search(r"--init-from (\S+)", commands[-1]).group(1)
    (out / "trainer_state.json").write_text(json.dumps(state))
    update_metrics(out)
    print(name, sum(p.stat().st_size for p in out.iterdir()), "bytes")
