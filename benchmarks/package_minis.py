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

from bert_core.model.growth import repeated_positions
from bert_core.training.heldout import update_metrics
from bert_core.training.run_builder import pretraining_rate_of

FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def repo_command(command: str, run: Path) -> str:
    """The command as the repository would run it: its output in `run` (not the lent machine's scratch folder),
    without --json, which only changed how it printed."""
    command = re.sub(r"--out \S+", f"--out {run.as_posix()}", command)
    return re.sub(r" --json\b", "", command)


def phase_of(metrics: dict) -> dict:
    machine = metrics.get("machine") or {}
    phase = {k: metrics.get(k) for k in ("steps", "tokens_seen", "training_time_s", "heldout")} | {
        "gpu": machine.get("gpu")}
    if not machine.get("gpu") and machine:
        phase["cpu"] = f"{machine.get('cpu_count')}-core {machine.get('processor')} CPU"
    return phase


def where(phases: list[dict]) -> str:
    """The machines the phases ran on, as a sentence names them."""
    names = []
    for p in phases:
        name = p.get("gpu") or p.get("cpu") or "a GPU"
        if name not in names:
            names.append(name)
    return " and ".join(names)


def check_started_as(started_as: Path, into: Path) -> None:
    """`started_as` must be `into`'s weights (as the run before it saved them, in float32) with the positions from
    its training length on copied from the trained ones, as `train --copy-positions` does: nothing else."""
    start, shipped = load_file(started_as / "model.safetensors"), load_file(into / "model.safetensors")
    trained = json.loads((into / "trainer_state.json").read_text())["train_config"]["max_seq_length"]
    for name, w in start.items():
        expect = shipped[name].float()
        if name.endswith("position_embeddings.weight"):
            expect = repeated_positions(expect, trained)
        if not torch.allclose(w.float(), expect, rtol=1e-2, atol=1e-2):   # bf16 rounding of the shipped copy
            raise SystemExit(f"error: {started_as} is not {into} with its positions copied ({name} differs)")


def package(run: Path, into: Path, started_as: Path | None = None) -> int:
    old = json.loads((into / "metrics.json").read_text())
    state = json.loads((run / "trainer_state.json").read_text())
    init = state["metadata"]["init_from"]["folder"]
    if Path(init).resolve() != (started_as or into).resolve():
        raise SystemExit(f"error: {run} continued {init}, not {started_as or into}")
    # The run's own commands (its `train`, then any `--resume`), after those of the folder it started from.
    start_state = json.loads(((started_as or into) / "trainer_state.json").read_text())
    before = start_state["metadata"]["commands"]
    # What `train` records since (run_builder.pretraining_rate_of), for a run made before it did: the highest rate
    # behind the start's weights, which the fine-tuning rule reads.
    start_rate = pretraining_rate_of(start_state)
    if start_rate is not None:
        state["metadata"]["init_from"].setdefault("pretraining_rate", start_rate)
    commands = [repo_command(c, run) for c in state["metadata"]["commands"][len(before):]]
    if started_as is not None:
        check_started_as(started_as, into)
        commands = [c.replace(f"--init-from {init}", f"--init-from {into.as_posix()}") for c in commands]
    m = json.loads((run / "metrics.json").read_text())
    m["commands"] = list(old.get("commands", [])) + commands
    earlier_gpu = (old.get("machine") or {}).get("gpu")   # the first packaging ran both its phases on one GPU
    m["phases"] = [{**p, "gpu": p.get("gpu") or earlier_gpu} for p in old.get("phases") or [phase_of(old)]]
    m["phases"].append(phase_of(m))
    m.pop("eval", None)   # recomputed on the shipped bf16 weights below
    config = json.loads((run / "config.json").read_text())
    m["pretraining_dropout"] = config["hidden_dropout_prob"]
    m["packaging"] = (
        f"Pretrained in {len(m['phases'])} phases on {where(m['phases'])} with dropout "
        f"{m['pretraining_dropout']:g} ('phases', "
        "'commands'; a continuation's --init-from is the shipped folder as the commit before it had it"
        + ("; the last phase started from the run before it in float32, its positions copied by hand as "
           "--copy-positions now does, not from that folder's bf16 weights" if started_as is not None else "")
        + "); then "
        "packaged: weights cast to bf16 (they load in float32 here, and as bf16 or float32 in "
        "transformers), and config.json's hidden and attention dropout set to BERT's fine-tuning 0.1, which is what "
        "`finetune` and transformers' from_pretrained take from the folder (docs/shipped-model.md). 'heldout' and "
        f"'per_corpus' are the last phase's final evaluation (under its bf16 autocast, on {where(m['phases'][-1:])}); "
        "'eval' was run on the shipped folder in float32 on a CPU.")
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
    parser.add_argument("--run", type=Path, required=True, help="the folder the continuing run wrote (its --out)")
    parser.add_argument("--into", type=Path, required=True, help="the shipped folder it continued")
    parser.add_argument("--started-as", type=Path, default=None,
                        help="the folder the run's --init-from named, when that was a copy of --into with its "
                             "positions copied by hand (before `train --copy-positions` did it): checked, and the "
                             "command recorded as --init-from --into")
    args = parser.parse_args()
    print(args.into, package(args.run, args.into, args.started_as), "bytes")
