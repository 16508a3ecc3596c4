"""The Train page's default toy run raced on movie-review polarity at the Fine-tune page's defaults: the figures the
page's warning quotes when a model that has read only the toy grammar meets English text
(bert_core.inspect.finetune_kinds.TOY_ON_POLARITY; docs/benchmarks.md, "A toy model raced on English").

    PYTHONPATH=. python benchmarks/toy_model_on_english.py --out runs/toy-on-english

Trains the default spec of the Train page (bert_core.serve.train_spec.default_spec) once, then runs the `finetune`
command the page's race equals (benchmarks/finetune_page_defaults.page_args) at seeds 0-2. One thread each; a
finished part is not run again. About 5 minutes of a 2-core CPU. Needs the shared polarity data (../shared/data).
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from finetune_page_defaults import page_args  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    from bert_core.serve.train_spec import build_trainer

    from bert_core.training.train_spec import default_spec

    torch.set_num_threads(1)
    folder = args.out / "toy-default"
    if not (folder / "model.safetensors").exists():
        trainer = build_trainer(default_spec())
        trainer.run()
        trainer.save(folder)
    rows = {}
    for seed in args.seeds:
        target = args.out / f"polarity-{seed}.json"
        if not target.exists():
            cmd = [sys.executable, "-m", "bert_core", "finetune", "--checkpoint", str(folder),
                   *page_args("polarity"), "--seed", str(seed), "--json"]
            done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
            target.write_text(done.stdout)
        rows[seed] = {r["name"]: round(100 * r["accuracy"], 1) for r in json.loads(target.read_text())["results"]}
    print("| seed | pretrained | from scratch | bag of words |\n| --- | --- | --- | --- |")
    for seed, r in rows.items():
        print(f"| {seed} | {r['pretrained']}% | {r['scratch']}% | {r['tfidf']}% |")


if __name__ == "__main__":
    main()
