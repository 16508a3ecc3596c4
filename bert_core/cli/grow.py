"""`python -m bert_core grow`: a trained checkpoint grown wider and deeper (bert_core.model.growth), for `train
--init-from` to train on, so a bigger model starts from what a smaller one learned."""

from __future__ import annotations

from bert_core.cli.arguments import SEED, int_arg, path_arg
from bert_core.errors import BertCoreError
from bert_core.model.files import CHECKPOINT_FILES, check_output_folder, folder_built_beside
from bert_core.model.config import PRESETS
from bert_core.model.growth import grow_checkpoint
from bert_core.training.finetune import checkpoint_pretraining_rate
from bert_core.training.heldout import heldout_split_record


def add_parser(sub):
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


def run(args) -> int:
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
