"""What storing a checkpoint's weights in 16 bits costs (`python -m bert_core export`): the same held-out batches
scored by the folder before and after, side by side, with how many of the predictions agree.

    PYTHONPATH=. python benchmarks/stored_weights.py --before /tmp/ckpt_before/bert-tiny-english \
        --after checkpoints/bert-tiny-english --text-file ../refs/brown-heldout.txt --text-file ../refs/wiki.txt

`eval`'s settings (seed 0, 50 batches of 32, the folder's training length), in float32 on the CPU as `eval` scores.
Prints one JSON line per text file.
"""
import argparse
import json

import torch

from bert_core.data.corpora import corpus_from_file
from bert_core.data.objectives import objective_settings
from bert_core.data.pretraining_data import PretrainingData
from bert_core.model.bert import is_causal
from bert_core.model.checkpoint import load_checkpoint


def predictions(model, batches):
    """The top-1 prediction and the loss of every scored position, in order."""
    tops, losses = [], []
    with torch.no_grad():
        for batch in batches:
            inputs = batch.model_inputs()
            labels = inputs.pop("labels")
            logits = model(**inputs, full_mlm_logits=True).mlm_logits.float()
            if batch.causal:
                logits, labels = logits[:, :-1], labels[:, 1:]
            keep = labels != -100
            rows, targets = logits[keep], labels[keep]
            tops.append(rows.argmax(-1))
            losses.append(torch.nn.functional.cross_entropy(rows, targets, reduction="none"))
            tops[-1] = torch.stack([tops[-1], targets])
    return torch.cat(tops, 1), torch.cat(losses)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--text-file", action="append", required=True)
    p.add_argument("--seq-len", type=int, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    before, after = load_checkpoint(args.before), load_checkpoint(args.after)
    causal = is_causal(before.model)
    seq_len = args.seq_len or before.trainer_state["train_config"]["max_seq_length"]
    for text_file in args.text_file:
        data = PretrainingData(corpus_from_file(text_file), before.tokenizer, max_seq_length=seq_len, batch_size=32,
                               mask_rate=0.15, seed=0, **objective_settings("clm" if causal else "mlm"))
        batches = data.eval_batches(50, seed=0)
        (top_a, loss_a), (top_b, loss_b) = predictions(before.model.eval(), batches), \
            predictions(after.model.eval(), batches)
        targets = top_a[1]
        print(json.dumps({
            "text_file": text_file, "positions": int(targets.numel()),
            "accuracy_before": float((top_a[0] == targets).float().mean()),
            "accuracy_after": float((top_b[0] == targets).float().mean()),
            "perplexity_before": float(loss_a.mean().exp()), "perplexity_after": float(loss_b.mean().exp()),
            "top1_agreement": float((top_a[0] == top_b[0]).float().mean()),
        }))


if __name__ == "__main__":
    main()
