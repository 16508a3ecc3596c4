"""How long each view of the "How BERT computes" page takes (a benchmark, not a test): the computation, its
Plotly figures and their JSON (what the server sends), on a shipped checkpoint and a 32-token input.

    python benchmarks/computation_views.py [--checkpoint checkpoints/bert-mini-english] [--repeats 15]
                                           [--threads 1 2] [--json out.json]

Prints a Markdown table: median, min and max milliseconds per view, for each torch thread count. Target (issue 59):
every view under 1 s, the grammar check of one pair under 2 s, on a 2-core CPU with the shipped mini. Issue 73's
views too: the feed-forward block and its units, the weights as matrices and the q×k products, the layer probes for
every layer (target under 30 s; needs CoNLL-2000, else left out and said so) and the heads that follow syntax (needs
UD English EWT in the cache, else left out and said so). A view of several seconds is timed --slow-repeats times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bert_core.inspect import computation_figures as cf  # noqa: E402
from bert_core.inspect.attention_steps import (attention_steps, heads_off_effect, logit_lens,  # noqa: E402
                                               with_temperature)
from bert_core.inspect.embeddings import (SENSE_SENTENCES, contextual_neighbours, embedding_parts,  # noqa: E402
                                          heldout_pool, nearest_neighbours, token_pool)
from bert_core.inspect.word_map_vectors import word_map  # noqa: E402
from bert_core.inspect.salience import salience_panel_data  # noqa: E402
from bert_core.model.bert import BertForQuestionAnswering, BertForSequenceClassification  # noqa: E402
from bert_core.model.bert import BertForTokenClassification  # noqa: E402
from bert_core.inspect.grammar import compare_pair  # noqa: E402
from bert_core.inspect import feed_forward as ff, head_weights as hw, layer_probes as lp  # noqa: E402
from bert_core.inspect import syntax_heads as sh  # noqa: E402
from bert_core.data.task_downloads import local_task_csv  # noqa: E402
from bert_core.data.treebank import local_treebank, read_conllu  # noqa: E402
from bert_core.model.bert import is_causal  # noqa: E402
from bert_core.model.checkpoint import load_checkpoint  # noqa: E402

WORDS = ("the old man walked slowly along the river bank with his small dog , and the children who lived in the "
         "village watched them from the bridge while the sun went down behind the hills .").split()
PAIR = ("the keys to the old house are lost .", "the keys to the old house is lost .")


def text_of_tokens(tokenizer, pieces: int) -> str:
    """The first words of WORDS whose word pieces number exactly `pieces` (or as near as the words allow)."""
    words = []
    for w in WORDS * 4:
        if len(tokenizer.encode(" ".join([*words, w]))) > pieces:
            break
        words.append(w)
    return " ".join(words)


def views(model, tok, tokens: int) -> dict:
    """name -> a function that computes one view and builds (and serialises) its figures."""
    causal = is_causal(model)
    sentence = text_of_tokens(tok, tokens - 2)               # + [CLS] and [SEP]
    lens_text = (text_of_tokens(tok, tokens - 1) if causal    # + [CLS]
                 else text_of_tokens(tok, tokens - 3) + " [MASK]")
    rows = SENSE_SENTENCES["bank"]
    n = len(tok.encode(sentence)) + 2
    print(f"input: {n} tokens ({sentence!r})", file=sys.stderr)

    def send(*figs):
        return sum(len(f.to_json()) for f in figs)

    def attention():
        s = attention_steps(model, tok, sentence, 1, 1, 5)
        return send(cf.vectors_figure(s), cf.scores_figure(s, 0.5, with_temperature(s, 0.5)), cf.context_figure(s))

    def lens():
        result = logit_lens(model, tok, lens_text)
        return send(cf.lens_figure(result), cf.lens_lines_figure(result))

    def heads():
        return send(cf.heads_off_figure(heads_off_effect(model, tok, lens_text, [(0, 0), (1, 1)])))

    def embeddings():
        parts = embedding_parts(model, tok, sentence)
        return send(cf.embedding_parts_figure(parts, 3), cf.embedding_norms_figure(parts),
                    cf.neighbours_figure("king", nearest_neighbours(model, tok, "king")))

    def word_maps():
        return send(cf.word_map_figure(word_map(model, tok, "bank", [s for _, s in rows], [g for g, _ in rows])))

    def grammar():
        c = compare_pair(model, tok, *PAIR)
        return send(cf.shares_figure(c), cf.sentence_tokens_figure(c))

    pool_sentences, source = heldout_pool(None)   # the built-in pool: the same sentences on every machine
    pool = token_pool(model, tok, pool_sentences, source)

    def pool_encoding():
        return len(token_pool(model, tok, pool_sentences, source).tokens)

    def in_context():
        return send(cf.contextual_neighbours_figure(contextual_neighbours(model, tok, sentence, 5, pool)))

    def finetuned(kind):
        torch.manual_seed(0)   # a fresh head on the same encoder: the cost is the encoder's, trained or not
        head = {"labels": lambda: BertForSequenceClassification(model.config, num_labels=2),
                "tags": lambda: BertForTokenClassification(model.config, num_labels=3),
                "spans": lambda: BertForQuestionAnswering(model.config)}[kind]()
        head.bert.load_state_dict(model.bert.state_dict(), strict=False)
        return head.eval()

    finetuned_models = {kind: finetuned(kind) for kind in ("labels", "tags", "spans")}
    question = "who watched them from the bridge ?"

    def salience(kind):
        def run():
            text, text_b = (question, sentence) if kind == "spans" else (sentence, None)
            panel = salience_panel_data(finetuned_models[kind], tok, kind, text, text_b,
                                        label_names=["O", "B-NP", "I-NP"] if kind == "tags" else None)
            return send(*(f for _, f, _ in panel.figures))
        return run

    def grammar_32():
        c = compare_pair(model, tok, sentence, sentence.replace(" the ", " a ", 1))
        return send(cf.shares_figure(c), cf.sentence_tokens_figure(c))

    def feed_forward():
        ffn = ff.feed_forward_steps(model, attention_steps(model, tok, sentence, 1, 1, 5))
        return send(ff.feed_forward_figure(ffn), ff.gelu_figure(ffn, ffn.most_active))

    def units_firing():   # the unit pool for one layer (the page keeps it per model and layer) and its figure
        units = ff.unit_pool(model, tok, pool_sentences, source, 1)
        return send(ff.unit_firing_figure(ff.unit_firing(units, int(units.acts.mean(0).argmax()))))

    units_once = ff.unit_pool(model, tok, pool_sentences, source, 1)

    def unit_redraw():   # another unit picked: the pool is kept, only the ranking and the figure
        return send(ff.unit_firing_figure(ff.unit_firing(units_once, 7)))

    def weights_as_matrices():
        s = attention_steps(model, tok, sentence, 1, 1, 5)
        return send(*(hw.projection_figure(hw.head_projection(model, s, name, 5 if name == "query" else 3))
                      for name in hw.PROJECTIONS), hw.products_figure(s))

    extra = {"feed-forward block (block + activation figures)": feed_forward,
             f"feed-forward units: pool of {len(pool.tokens):,} tokens read at one layer + where a unit fires":
                 units_firing,
             "feed-forward units: another unit picked (pool kept)": unit_redraw,
             "weights as matrices: W_Q, W_K, W_V (3 figures) + q×k products": weights_as_matrices}
    conll = local_task_csv("conll2000")
    if conll is None:
        print("layer probes: CoNLL-2000 is not on this machine: left out", file=sys.stderr)
    else:
        data = lp._read(str(conll))

        def probes():
            result = lp.layer_probes(model, tok, data)
            return send(cf.layer_probes_figure(result))
        extra[f"layer probes, every layer ({lp.FIT_SENTENCES}+{lp.TEST_SENTENCES} sentences, model + random twin, "
              "fit + figure)"] = probes
    treebank = local_treebank()
    if treebank is None:
        print("syntax heads: UD English EWT is not in the cache (~/.cache/bert_core): left out", file=sys.stderr)
    else:
        sentences = read_conllu(treebank)

        def syntax():
            return send(sh.syntax_heads_figure(sh.syntax_heads(model, tok, sentences)))
        extra[f"heads that follow syntax ({len(sentences):,} UD EWT dev sentences + figure)"] = syntax

    return {**extra, "inside attention (3 figures)": attention, "each layer's guess (2 figures)": lens,
            "heads switched off": heads, "embeddings + neighbours (3 figures)": embeddings,
            "word map, 12 sentences x every layer": word_maps, f"grammar check, one pair {PAIR[0]!r}": grammar,
            f"grammar check, one pair of {n}-token sentences": grammar_32,
            f"contextual neighbours ({len(pool.tokens):,} pool tokens, pool encoded once)": in_context,
            f"encoding the neighbour pool ({len(pool.sentences)} sentences, once per model)": pool_encoding,
            "why it decided: a label (refined IG steps + heads grid)": salience("labels"),
            "why it decided: a tag (refined IG steps + heads grid)": salience("tags"),
            f"why it decided: an answer span ({len(tok.encode(question)) + n + 1} tokens, start and end)":
                salience("spans")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "bert-mini-english"))
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--json", default=None)
    p.add_argument("--only", nargs="+", default=None, help="time only the views whose name holds one of these")
    p.add_argument("--slow-repeats", type=int, default=3, help="repeats for a view whose first call took over 3 s")
    args = p.parse_args()
    ckpt = load_checkpoint(args.checkpoint, require_tokenizer=True)
    model = ckpt.model.eval()
    results = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, fn in views(model, ckpt.tokenizer, args.tokens).items():
            if args.only and not any(o in name for o in args.only):
                continue
            t = time.perf_counter()
            fn()  # warm: first-call allocations and Plotly's validators
            repeats = args.slow_repeats if time.perf_counter() - t > 3 else args.repeats
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t) * 1000)
            results.append({"view": name, "threads": threads, "median_ms": statistics.median(times),
                            "min_ms": min(times), "max_ms": max(times), "n": len(times)})
    print(f"{Path(args.checkpoint).name}, load average {os.getloadavg()[0]:.1f} at the end\n")
    print("| view | torch threads | median ms | min | max |")
    print("| --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['view']} | {r['threads']} | {r['median_ms']:.0f} | {r['min_ms']:.0f} | {r['max_ms']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
