"""Package a GPU continuation of a shipped mini as the new shipped folder: the run that benchmarks/gpu_continue.sh
brought back (it continued checkpoints/NAME with `--init-from`) -> checkpoints/NAME, its history kept.

bf16 weights, config.json's dropout set to BERT's fine-tuning 0.1 (the minis pretrain at 0: metrics.json records
it), the commands rewritten with repository paths and appended to the folder's earlier ones, one more entry in
"phases", and the reproducible "eval" section recomputed on the shipped weights (run from the repository root with
../shared/data beside it; about a minute on a CPU):
    PYTHONPATH=. python benchmarks/package_minis.py --run runs/gpu-bert-mini-3 --into checkpoints/bert-mini-english
The first packaging (two phases on an H200, grown from the tiny models) is in git history (commit 49d9d4c).
docs/shipped-model.md, "The mini models, pretrained on a GPU"."""
import argparse
import json
import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bert_core.training.heldout import update_metrics

FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def repo_command(command: str, run: Path) -> str:
    """The command as the repository would run it: its output in `run` (not the lent machine's scratch folder),
    without --json, which only changed how it printed."""
    command = re.sub(r"--out \S+", f"--out {run.as_posix()}", command)
    return re.sub(r" --json\b", "", command)


def phase_of(metrics: dict) -> dict:
    return {k: metrics.get(k) for k in ("steps", "tokens_seen", "training_time_s", "heldout")} | {
        "gpu": (metrics.get("machine") or {}).get("gpu")}


def package(run: Path, into: Path) -> int:
    old = json.loads((into / "metrics.json").read_text())
    state = json.loads((run / "trainer_state.json").read_text())
    init = state["metadata"]["init_from"]["folder"]
    if Path(init).resolve() != into.resolve():
        raise SystemExit(f"error: {run} continued {init}, not {into}")
    command = repo_command(state["metadata"]["commands"][-1], run)
    m = json.loads((run / "metrics.json").read_text())
    m["commands"] = list(old.get("commands", [])) + [command]
    earlier_gpu = (old.get("machine") or {}).get("gpu")   # the first packaging ran both its phases on one GPU
    m["phases"] = [{**p, "gpu": p.get("gpu") or earlier_gpu} for p in old.get("phases") or [phase_of(old)]]
    m["phases"].append(phase_of(m))
    m.pop("eval", None)   # recomputed on the shipped bf16 weights below
    config = json.loads((run / "config.json").read_text())
    m["pretraining_dropout"] = config["hidden_dropout_prob"]
    gpus = sorted({p["gpu"] for p in m["phases"] if p.get("gpu")})
    m["packaging"] = (
        f"Pretrained in {len(m['phases'])} phases on {' and '.join(gpus) or 'a GPU'} with dropout "
        f"{m['pretraining_dropout']:g} ('phases', "
        "'commands'; a continuation's --init-from is the shipped folder as the commit before it had it); then "
        "packaged: weights cast to bf16 (they load in float32 here, and as bf16 or float32 in "
        "transformers), and config.json's hidden and attention dropout set to BERT's fine-tuning 0.1, which is what "
        "`finetune` and transformers' from_pretrained take from the folder (docs/shipped-model.md). 'heldout' and "
        "'per_corpus' are the last phase's final evaluation in float32 on the GPU; 'eval' was run on the shipped "
        "folder on a CPU.")
    for f in FILES:
        shutil.copy(run / f, into / f)
    sd = load_file(run / "model.safetensors")
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}, into / "model.safetensors",
              metadata={"format": "pt"})
    config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = 0.1
    (into / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (into / "metrics.json").write_text(json.dumps(m, indent=1) + "\n")
    state["metadata"]["commands"] = [repo_command(c, run) for c in state["metadata"]["commands"]]
    (into / "trainer_state.json").write_text(json.dumps(state))
    update_metrics(into)
    return sum(p.stat().st_size for p in into.iterdir())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="the folder the GPU run wrote (its --out)")
    parser.add_argument("--into", type=Path, required=True, help="the shipped folder it continued")
    args = parser.parse_args()
    print(args.into, package(args.run, args.into), "bytes")
