"""`python -m bert_core heldout`: write a checkpoint's held-out text to a file (the documents `train` held out of
each corpus by seed, as its metrics.json / trainer_state.json record them), one sentence a line, a blank line
between documents, so that `python -m bert_core eval --text-file` on it reproduces the `eval` figures `train`
wrote into metrics.json (`evaluate_text_file`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bert_core.data.corpora import load_corpus, shard_folder, shard_heldout_corpora, split_heldout
from bert_core.data.objectives import MASK_RATE
from bert_core.errors import BertCoreError
from bert_core.model.files import read_json, require_checkpoint_folder, write_json_atomic, write_text_atomic


def _valid_record(record) -> bool:
    """A held-out split as `train` records it (the types heldout_documents relies on)."""
    if not isinstance(record, dict) or not isinstance(record.get("corpora"), list) or not record["corpora"]:
        return False
    seed, fraction = record.get("seed"), record.get("fraction")
    return (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**32
            and isinstance(fraction, (int, float)) and 0 < fraction < 1
            and all(isinstance(c, dict) and isinstance(c.get("spec"), str) and c["spec"]
                    and isinstance(c.get("documents", 0), int) for c in record["corpora"]))


def heldout_split_record(checkpoint: str | Path) -> dict:
    """The held-out split a checkpoint recorded: {"seed", "fraction", "corpora": [{"spec", ...}, ...]}."""
    folder = Path(checkpoint)
    if folder.is_file():
        require_checkpoint_folder(folder)  # says what the file is (a pickle, a zip, a file inside a checkpoint)
    if not folder.is_dir():
        raise BertCoreError(f"{folder} does not exist; give a checkpoint folder written by `python -m bert_core train`")
    # growth.json: a folder `grow` wrote, whose weights are its source's and never saw the source's held-out text.
    for name, section, key in (("metrics.json", None, "heldout_split"), ("trainer_state.json", "metadata", "heldout"),
                               ("growth.json", None, "heldout")):
        path = folder / name
        if path.is_file():
            data = read_json(path)
            part = data.get(section) if section and isinstance(data, dict) else data
            record = part.get(key) if isinstance(part, dict) else None
            if record is not None and not _valid_record(record):
                raise BertCoreError(f"{path} records a held-out split that is damaged ({key} must hold seed, fraction "
                                    "and corpora); restore the file from a backup")
            if record:
                return record
    raise BertCoreError(f"{folder} records no held-out split (no metrics.json or trainer_state.json from "
                        "`python -m bert_core train`, nor a growth.json from `grow` of one)")


def heldout_documents(record: dict, corpus_loader=None) -> list[list[str]]:
    """Rebuild the held-out documents of every corpus in `record`, in the order training split them."""
    load = corpus_loader or (lambda spec, seed: load_corpus(spec, seed=seed))
    seed, fraction = record["seed"], record["fraction"]
    docs: list[list[str]] = []
    for entry in record["corpora"]:
        if shard_folder(entry["spec"]) is not None:   # the build held out whole documents: they are its heldout/
            docs.extend(d for c in shard_heldout_corpora(shard_folder(entry["spec"])).values() for d in c.documents)
            continue
        corpus = load(entry["spec"], seed)
        if "documents" in entry and len(corpus.documents) != entry["documents"]:
            raise BertCoreError(f"corpus {entry['spec']!r} now has {len(corpus.documents)} documents, but the "
                                f"checkpoint was trained on {entry['documents']}: it is not the same text")
        _, held = split_heldout(corpus, fraction=fraction, seed=seed)
        docs.extend(held.documents)
    return docs


def select_corpora(record: dict, wanted: list[str] | None) -> dict:
    """`record` with only the corpora named in `wanted` (each a corpus's spec as `train` was given it, or its name),
    in the record's order; all of them for None. An unknown name is refused with the names there are."""
    if not wanted:
        return record
    entries = record["corpora"]
    unknown = [w for w in wanted if not any(w in (e["spec"], e.get("name")) for e in entries)]
    if unknown:
        raise BertCoreError(f"the checkpoint held out no corpus {', '.join(map(repr, unknown))}; it held out "
                            + ", ".join(e["spec"] for e in entries))
    return {**record, "corpora": [e for e in entries if e["spec"] in wanted or e.get("name") in wanted]}


def documents_to_text(documents: list[list[str]]) -> str:
    """One sentence per line, a blank line between documents: what `corpora.documents_from_text` reads back."""
    return "\n\n".join("\n".join(" ".join(s.split()) for s in doc) for doc in documents) + "\n"


def write_heldout_text(checkpoint: str | Path, out: str | Path, corpus_loader=None,
                       corpora: list[str] | None = None) -> dict:
    """Write the checkpoint's held-out text to `out` (only that of `corpora`, when given: select_corpora); returns
    what was written (path, documents, sentences)."""
    record = select_corpora(heldout_split_record(checkpoint), corpora)
    docs = heldout_documents(record, corpus_loader)
    out = write_text_atomic(out, documents_to_text(docs))
    return {"path": str(out), "documents": len(docs), "sentences": sum(len(d) for d in docs),
            "corpora": [e["spec"] for e in record["corpora"]], "seed": record["seed"], "fraction": record["fraction"]}


def evaluate_text_file(checkpoint, text_file, seed=0, batches=50, batch_size=32, seq_len=None, mask_rate=MASK_RATE,
                       device="auto") -> dict:
    """Evaluate a checkpoint on a text file; returns the figures and the unigram baseline as a dict: masked-token
    figures for a BERT, next-token ones (keys next_token_*, "objective": "clm") for a causal model."""
    # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.training.evaluation import evaluate_checkpoint_on_text

    return evaluate_checkpoint_on_text(checkpoint, text_file, seed=seed, batches=batches, batch_size=batch_size,
                                       seq_len=seq_len, mask_rate=mask_rate, device=device)


def reproducible_eval(checkpoint: str | Path, corpus_loader=None) -> dict:
    """Run `heldout` then `eval` (default settings) on a checkpoint: the figures and the two commands that give them.
    `train` stores this under "eval" in metrics.json, so the published figures are the ones a reader reproduces."""
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
    path = Path(checkpoint) / "metrics.json"
    metrics = read_json(path) if path.is_file() else {}
    if not isinstance(metrics, dict):
        raise BertCoreError(f"{path} does not hold a JSON object; restore it from a backup or delete it")
    metrics["eval"] = reproducible_eval(checkpoint, corpus_loader)
    write_json_atomic(path, metrics)
    return metrics["eval"]
