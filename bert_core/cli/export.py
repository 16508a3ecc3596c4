"""`python -m bert_core export`: a checkpoint folder for sharing, its weights stored in float16
(bert_core.model.stored_weights), and its recorded held-out figures measured again on the stored weights."""

from __future__ import annotations

from pathlib import Path

from bert_core.cli.arguments import path_arg
from bert_core.cli.console import percent
from bert_core.errors import BertCoreError
from bert_core.model.files import check_output_folder, read_json, write_json
from bert_core.model.stored_weights import STORAGE_DTYPES, store_checkpoint
from bert_core.training.heldout import reproducible_eval


def add_parser(sub):
    p = sub.add_parser("export", help="write a checkpoint folder for sharing, its weights in float16 (half the size)",
                       description="Copy a checkpoint folder with its weights stored in float16 (or bfloat16, or "
                                   "float32) and "
                                   "without optimizer state: half the bytes, every loader still computes in float32 "
                                   "(the config says so), and it loads in transformers as it is. When its "
                                   "metrics.json records a held-out evaluation (\"eval\"), that is run again on the "
                                   "stored weights and the figures before are kept beside the new ones.")
    p.add_argument("--checkpoint", type=path_arg, required=True, help="checkpoint folder to export")
    p.add_argument("--out", type=path_arg, required=True,
                   help="folder to write (the checkpoint folder itself, with --overwrite, converts it in place)")
    p.add_argument("--dtype", choices=sorted(STORAGE_DTYPES), default="float16", help="how the weights are stored (default float16: 11 significant bits, half of float32's bytes)")
    p.add_argument("--overwrite", action="store_true", help="replace the folder --out if it holds a checkpoint")
    p.add_argument("--skip-eval", action="store_true",
                   help="do not measure the recorded held-out evaluation again (it needs the training corpora); "
                        "the figures before are then kept, marked as measured on the weights before export")
    return p


def _measure_again(out: Path, skip: bool):
    """The `check` for store_checkpoint: the folder's "eval" figures measured again on the stored weights."""
    def check(tmp: Path, record: dict) -> None:
        metrics = read_json(tmp / "metrics.json") if (tmp / "metrics.json").is_file() else None
        if not isinstance(metrics, dict) or not isinstance(metrics.get("eval"), dict):
            return
        # The headline figures (the full record, its baseline and text, stays in "eval").
        before = {k: v for k, v in metrics["eval"].items() if isinstance(v, (int, float)) and k != "seed"}
        record["eval_before"] = before
        if skip:
            record["eval_measured_on"] = "the weights before export"
            return
        try:
            again = reproducible_eval(tmp)
        except BertCoreError as e:
            raise BertCoreError(f"{e} (the held-out evaluation in metrics.json is measured again on the stored "
                                "weights; --skip-eval keeps the figures before instead)") from None
        again["commands"] = [c.replace(str(tmp), str(out)) for c in again["commands"]]
        metrics["eval"] = again
        record["eval_measured_on"] = "the stored weights"
        write_json(tmp / "metrics.json", metrics)
    return check


def _accuracy_key(figures: dict) -> str:
    return "next_token_accuracy" if figures.get("objective") == "clm" else "masked_token_accuracy"


def run(args) -> int:
    same = Path(args.out).expanduser().resolve() == Path(args.checkpoint).expanduser().resolve()
    if same and not args.overwrite:
        raise BertCoreError("--out is the checkpoint folder itself; add --overwrite to convert it in place")
    out = check_output_folder(args.out, overwrite=args.overwrite)
    record = store_checkpoint(args.checkpoint, out, args.dtype, check=_measure_again(out, args.skip_eval))
    mib = 1024 * 1024
    sizes = (f"{record['bytes_before'] / mib:.1f} MiB -> " if record.get("bytes_before") else "") + \
        f"{record['bytes_after'] / mib:.1f} MiB"
    print(f"wrote {out}: {record['floating_weights']:,} weights stored as {args.dtype} (model.safetensors {sizes}); "
          f"largest change {record['largest_rel_change']:.1e} of a weight")
    before = record.get("eval_before")
    if before and record.get("eval_measured_on") == "the stored weights":
        after = read_json(Path(out) / "metrics.json")["eval"]
        key = _accuracy_key(after)
        print(f"held-out {key.replace('_', ' ')}: {percent(before.get(key))} before, {percent(after.get(key))} "
              f"stored; perplexity {before.get('perplexity', float('nan')):.3f} before, "
              f"{after.get('perplexity', float('nan')):.3f} stored")
    return 0
