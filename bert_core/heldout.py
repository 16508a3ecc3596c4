"""`python -m bert_core heldout`: write a checkpoint's held-out text to a file, so anyone can re-run its evaluation.

`train` keeps part of every corpus out of training (`split_heldout`, by seed) and records the split in
`metrics.json` / `trainer_state.json`. This module rebuilds exactly those documents and writes them one sentence
per line with a blank line between documents, the plain-text format `load_corpus` reads back, so that

    python -m bert_core heldout --checkpoint DIR --out heldout.txt
    python -m bert_core eval --checkpoint DIR --text-file heldout.txt

reproduces the `eval` figures that `train` wrote into `metrics.json`.
"""

from __future__ import annotations

import json
from pathlib import Path

from bert_core.errors import BertCoreError


def heldout_split_record(checkpoint: str | Path) -> dict:
    """The held-out split a checkpoint recorded: {"seed", "fraction", "corpora": [{"spec", ...}, ...]}."""
    folder = Path(checkpoint)
    if not folder.is_dir():
        raise BertCoreError(f"{folder} is not a folder; give a checkpoint folder written by `python -m bert_core train`")
    for name, get in (("metrics.json", lambda d: d.get("heldout_split")),
                      ("trainer_state.json", lambda d: d.get("metadata", {}).get("heldout"))):
        path = folder / name
        if path.is_file():
            try:
                record = get(json.loads(path.read_text(encoding="utf-8")))
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
                raise BertCoreError(f"{path} is not valid JSON: {e}") from e
            if record and record.get("corpora"):
                return record
    raise BertCoreError(f"{folder} records no held-out split (no metrics.json or trainer_state.json from "
                        "`python -m bert_core train`)")


def heldout_documents(record: dict, corpus_loader=None) -> list[list[str]]:
    """Rebuild the held-out documents of every corpus in `record`, in the order training split them."""
    from bert_core.corpora import load_corpus, split_heldout

    load = corpus_loader or (lambda spec, seed: load_corpus(spec, seed=seed))
    seed, fraction = record["seed"], record["fraction"]
    docs: list[list[str]] = []
    for entry in record["corpora"]:
        corpus = load(entry["spec"], seed)
        if "documents" in entry and len(corpus.documents) != entry["documents"]:
            raise BertCoreError(f"corpus {entry['spec']!r} now has {len(corpus.documents)} documents, but the "
                                f"checkpoint was trained on {entry['documents']}: it is not the same text")
        _, held = split_heldout(corpus, fraction=fraction, seed=seed)
        docs.extend(held.documents)
    return docs


def documents_to_text(documents: list[list[str]]) -> str:
    """One sentence per line, a blank line between documents: what `corpora.documents_from_text` reads back."""
    return "\n\n".join("\n".join(" ".join(s.split()) for s in doc) for doc in documents) + "\n"


def write_heldout_text(checkpoint: str | Path, out: str | Path, corpus_loader=None) -> dict:
    """Write the checkpoint's held-out text to `out`; returns what was written (path, documents, sentences)."""
    record = heldout_split_record(checkpoint)
    docs = heldout_documents(record, corpus_loader)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(documents_to_text(docs), encoding="utf-8")
    return {"path": str(out), "documents": len(docs), "sentences": sum(len(d) for d in docs),
            "corpora": [e["spec"] for e in record["corpora"]], "seed": record["seed"], "fraction": record["fraction"]}


def reproducible_eval(checkpoint: str | Path, corpus_loader=None) -> dict:
    """Run `heldout` then `eval` (default settings) on a checkpoint: the figures and the two commands that give them.

    `train` stores this under "eval" in metrics.json, so the published figures are the ones a reader reproduces.
    """
    import tempfile

    from bert_core.cli import evaluate_text_file

    with tempfile.TemporaryDirectory() as tmp:
        text_file = Path(tmp) / "heldout.txt"
        info = write_heldout_text(checkpoint, text_file, corpus_loader)
        figures = evaluate_text_file(checkpoint, text_file)
    figures.pop("text_file", None)
    figures.pop("checkpoint", None)
    return {
        "commands": [f"python -m bert_core heldout --checkpoint {checkpoint} --out heldout.txt",
                     f"python -m bert_core eval --checkpoint {checkpoint} --text-file heldout.txt"],
        "heldout_text": {k: info[k] for k in ("documents", "sentences", "corpora")},
        **figures,
    }


def update_metrics(checkpoint: str | Path, corpus_loader=None) -> dict:
    """Add (or refresh) the reproducible "eval" section of a checkpoint's metrics.json; returns it."""
    from bert_core.checkpoint import write_json

    path = Path(checkpoint) / "metrics.json"
    metrics = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    metrics["eval"] = reproducible_eval(checkpoint, corpus_loader)
    tmp = path.with_name(".metrics.json.tmp")
    write_json(tmp, metrics)
    tmp.replace(path)
    return metrics["eval"]


def add_parser(sub):
    p = sub.add_parser("heldout", help="write a checkpoint's held-out text to a file (to re-run its evaluation)",
                       description="Rebuild the documents that `train` held out (the split recorded in the "
                                   "checkpoint's metrics.json) and write them as plain text for `eval --text-file`.")
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint folder written by `train`")
    p.add_argument("--out", type=Path, help="text file to write")
    p.add_argument("--update-metrics", action="store_true",
                   help="also evaluate the checkpoint on it and store the figures and commands under \"eval\" "
                        "in its metrics.json")
    return p


def run(args) -> int:
    if args.out is None and not args.update_metrics:
        raise BertCoreError("give --out FILE (and/or --update-metrics)")
    if args.update_metrics:
        r = update_metrics(args.checkpoint)
        print(f"metrics.json eval: masked-token accuracy {100 * r['masked_token_accuracy']:.2f}% on "
              f"{r['masked_tokens']} masked tokens, perplexity {r['perplexity']:.1f}, "
              f"NSP {100 * r['nsp_accuracy']:.2f}%")
    if args.out is None:
        return 0
    info = write_heldout_text(args.checkpoint, args.out)
    print(f"wrote {info['documents']} held-out documents ({info['sentences']} sentences) of "
          f"{', '.join(info['corpora'])} to {info['path']}")
    return 0
