"""The commands that write something new from a trained checkpoint: `grow` (a wider, deeper model to train on:
bert_core.model.growth), `heldout` (the documents it held out, and its figures on them: bert_core.training.heldout)
and `export` (a folder for sharing, its weights in float16: bert_core.model.checkpoint, with its held-out
figures measured again on the stored weights)."""

from __future__ import annotations

from pathlib import Path

from bert_core.cli.arguments import SEED, int_arg, path_arg
from bert_core.cli.console import percent
from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import STORAGE_DTYPES, store_checkpoint
from bert_core.model.config import PRESETS
from bert_core.model.files import (CHECKPOINT_FILES, check_output_file, check_output_folder, folder_built_beside,
                                   read_json, write_json)
from bert_core.model.growth import grow_checkpoint
from bert_core.training.finetune import checkpoint_pretraining_rate
from bert_core.training.heldout import (heldout_split_record, reproducible_eval, select_corpora, update_metrics,
                                        write_heldout_text)


def add_grow(sub):
    p = sub.add_parser("grow", help="grow a trained checkpoint into a wider, deeper one (to train on)",
                       description="Copy a trained BERT's units into a model a whole number of times wider (the "
                                   "same function: Net2Net) and deeper (its layers repeated in order: progressive "
                                   "stacking), with its tokenizer, then continue it with `train --init-from OUT`.")
    p.add_argument("--checkpoint", type=path_arg, required=True, help="the trained checkpoint folder to grow")
    p.add_argument("--preset", choices=sorted(PRESETS), help="the size to grow to (or --hidden-size and --layers)")
    p.add_argument("--hidden-size", type=int_arg(1), help="hidden size: a whole multiple of the checkpoint's")
    p.add_argument("--layers", type=int_arg(1), help="layers: a whole multiple of the checkpoint's")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the random shares that tell the copies apart")
    p.add_argument("--out", type=path_arg, required=True, help="new folder for the grown checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace the folder --out if it exists")
    return p


def run_grow(args) -> int:
    size = dict(PRESETS[args.preset]) if args.preset else {}
    hidden = args.hidden_size or size.get("hidden_size")
    layers = args.layers or size.get("num_hidden_layers")
    if hidden is None or layers is None:
        raise BertCoreError("give --preset, or both --hidden-size and --layers")
    out = check_output_folder(args.out, overwrite=args.overwrite)
    try:   # a Hugging Face BERT records none: its held-out text is not ours to know
        heldout = heldout_split_record(args.checkpoint)
    except BertCoreError:
        heldout = None
    # Put together beside --out and moved into place whole, as every checkpoint is: an old folder there is replaced
    # only once the grown one is complete, and a full disk leaves it as it was.
    with folder_built_beside(out, owned=CHECKPOINT_FILES) as tmp:
        r = grow_checkpoint(args.checkpoint, tmp, hidden, layers, seed=args.seed,
                            pretraining_rate=checkpoint_pretraining_rate(args.checkpoint), heldout=heldout)
    f = r["from_size"]
    # The heads grow with the width (the head size stays), so a preset's own head count may differ: say it.
    print(f"grew {args.checkpoint} from {f['num_hidden_layers']} layers x {f['hidden_size']} to {layers} layers x "
          f"{hidden} ({r['num_attention_heads']} heads) into {out}; train it on with: python -m bert_core train "
          f"--init-from {out} ...")
    return 0


def add_heldout(sub):
    p = sub.add_parser("heldout", help="write a checkpoint's held-out text to a file (to re-run its evaluation)",
                       description="Rebuild the documents that `train` held out (the split recorded in the "
                                   "checkpoint's metrics.json) and write them as plain text for `eval --text-file`.")
    p.add_argument("--checkpoint", type=path_arg, required=True, help="checkpoint folder written by `train`")
    p.add_argument("--out", type=path_arg, help="text file to write (a new file, or an existing one with --overwrite)")
    p.add_argument("--corpus", action="append", metavar="SPEC",
                   help="only this corpus's held-out documents (its --corpus as `train` was given it, or its name; "
                        "repeat for more), e.g. to score Brown alone")
    p.add_argument("--overwrite", action="store_true", help="replace the file --out if it exists")
    p.add_argument("--update-metrics", action="store_true",
                   help="also evaluate the checkpoint on it and store the figures and commands under \"eval\" "
                        "in its metrics.json")
    return p


def run_heldout(args) -> int:
    if args.out is None and not args.update_metrics:
        raise BertCoreError("give --out FILE (and/or --update-metrics)")
    if args.out is not None:
        check_output_file(args.out, overwrite=args.overwrite)
    # A folder without a split, or a --corpus it did not hold out, is refused before any evaluation.
    select_corpora(heldout_split_record(args.checkpoint), args.corpus)
    if args.corpus and args.out is None:
        raise BertCoreError("--corpus chooses what --out holds: give --out FILE")
    if args.update_metrics:
        r = update_metrics(args.checkpoint)
        if r["objective"] == "clm":
            print(f"metrics.json eval: next-token accuracy {100 * r['next_token_accuracy']:.2f}% on "
                  f"{r['predicted_tokens']} predicted tokens, next-token perplexity {r['perplexity']:.1f}")
        else:
            print(f"metrics.json eval: masked-token accuracy {100 * r['masked_token_accuracy']:.2f}% on "
                  f"{r['masked_tokens']} masked tokens, perplexity {r['perplexity']:.1f}, "
                  f"NSP {100 * r['nsp_accuracy']:.2f}%")
    if args.out is None:
        return 0
    info = write_heldout_text(args.checkpoint, args.out, corpora=args.corpus)
    print(f"wrote {info['documents']} held-out documents ({info['sentences']} sentences) of "
          f"{', '.join(info['corpora'])} to {info['path']}")
    return 0


def add_export(sub):
    p = sub.add_parser("export", help="write a checkpoint folder for sharing, its weights in float16 (half the size)",
                       description="Copy a checkpoint folder with its weights stored in float16 (or bfloat16, or "
                                   "float32) and without optimizer state: half the bytes, every loader still computes "
                                   "in float32 (the config says so), and it loads in transformers as it is. When its "
                                   "metrics.json records a held-out evaluation (\"eval\"), that is run again on the "
                                   "stored weights and the figures before are kept beside the new ones.")
    p.add_argument("--checkpoint", type=path_arg, required=True, help="checkpoint folder to export")
    p.add_argument("--out", type=path_arg, required=True,
                   help="folder to write (the checkpoint folder itself, with --overwrite, converts it in place)")
    p.add_argument("--dtype", choices=sorted(STORAGE_DTYPES), default="float16",
                   help="how the weights are stored (default float16: 11 significant bits, half of float32's bytes)")
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


def run_export(args) -> int:
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
        key = "next_token_accuracy" if after.get("objective") == "clm" else "masked_token_accuracy"
        print(f"held-out {key.replace('_', ' ')}: {percent(before.get(key))} before, {percent(after.get(key))} "
              f"stored; perplexity {before.get('perplexity', float('nan')):.3f} before, "
              f"{after.get('perplexity', float('nan')):.3f} stored")
    return 0
