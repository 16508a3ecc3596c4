"""`python -m bert_core train | eval | fill-mask | bench | finetune | heldout`: the command-line face of bert_core.

User mistakes print one line `error: ...` and exit with status 2; progress goes to stderr, results to stdout
(as JSON with --json).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from bert_core.allocator import TRAINING_COMMANDS, keep_freed_memory
from bert_core.errors import BertCoreError

HELDOUT_FRACTION = 0.1


class ProgressBar:
    """A one-line progress bar on stderr; on a non-terminal (a log file) it prints a line every `log_every_s`."""

    def __init__(self, stream=None, width: int = 30, log_every_s: float = 30.0):
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.log_every_s = log_every_s
        self._last = 0.0
        self._shown = False

    def update(self, fraction: float, text: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < (0.2 if self.tty else self.log_every_s):
            return
        self._last = now
        fraction = min(max(fraction, 0.0), 1.0)
        filled = int(round(fraction * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"[{bar}] {100 * fraction:5.1f}% {text}"
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(100))
            self._shown = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


# ---------------------------------------------------------------------------------------------- train


def _add_train(sub) -> None:
    from bert_core.training import SCHEDULES, default_recipe

    recipe = default_recipe()
    d = recipe["train_config"]
    p = sub.add_parser(
        "train",
        help="pretrain a BERT (MLM + NSP) on one or more corpora",
        description="Pretrain a BERT with masked-language modelling and next-sentence prediction. "
        f"{int(HELDOUT_FRACTION * 100)}%% of each corpus's documents (seeded) are held out for evaluation. "
        "Runs unchanged under torchrun --nproc_per_node=N (DistributedDataParallel).",
    )
    p.add_argument("--corpus", action="append", required=False, metavar="SPEC",
                   help="toy | tinyshakespeare | wikitext-2 | brown | a text file; repeat for several (default toy)")
    p.add_argument("--out", type=Path, help="checkpoint folder to write (required unless --resume)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue the run saved in DIR (same corpora)")
    p.add_argument("--preset", default=recipe["preset"],
                   help=f"model size: nano tiny mini small medium base (default {recipe['preset']})")
    p.add_argument("--vocab-size", type=int, default=8000, help="WordPiece vocabulary size to train (default 8000)")
    p.add_argument("--tokenizer", type=Path, help="use the tokenizer in this folder instead of training one")
    p.add_argument("--init-from", type=Path, metavar="DIR",
                   help="start from the weights, size and tokenizer of this checkpoint (a new run: new data order, "
                        "optimizer and schedule), e.g. to continue at a longer --seq-len as BERT's paper did")
    p.add_argument("--seq-len", type=int, default=d.max_seq_length, help="maximum sequence length (default 128)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"sequences per step per process (default {d.batch_size})")
    p.add_argument("--grad-accum", type=int, default=d.grad_accum, help="micro-batches per optimizer step")
    p.add_argument("--lr", type=float, default=d.learning_rate, help=f"peak learning rate (default {d.learning_rate:g})")
    p.add_argument("--warmup", type=float, default=d.warmup_ratio, help="warmup as a fraction of the run")
    p.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="learning-rate schedule (default linear; 'time' when only --time-budget is given)")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--max-grad-norm", type=float, default=d.max_grad_norm, help="gradient clipping (0 = off)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int, help="number of optimizer steps")
    g.add_argument("--time-budget", type=float, metavar="SECONDS", help="train for this many seconds")
    p.add_argument("--mask-rate", type=float, default=d.mask_rate)
    p.add_argument("--nsp", action=argparse.BooleanOptionalAction, default=d.nsp,
                   help=f"next-sentence prediction beside MLM (--no-nsp: MLM only; default {'on' if d.nsp else 'off'})")
    p.add_argument("--dropout", type=float, default=recipe["dropout"],
                   help=f"hidden and attention dropout (default {recipe['dropout']}; the BERT paper uses 0.1, which "
                        "only slows a model that is far from overfitting)")
    p.add_argument("--initializer-range", type=float, default=None, metavar="STD",
                   help="std of the initial weights (default: the preset's, BERT's 0.02)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--eval-every", type=int, default=0, help="steps between held-out evaluations (0 = start/end)")
    p.add_argument("--eval-batches", type=int, default=d.eval_batches, help="held-out batches per evaluation")
    p.add_argument("--history-limit", type=int, default=d.history_limit,
                   help=f"per-step records kept in trainer_state.json; beyond it every 2nd, 4th... step, evenly "
                        f"(default {d.history_limit}; 0 keeps all)")
    p.add_argument("--heldout-fraction", type=float, default=HELDOUT_FRACTION)
    p.add_argument("--checkpoint-every", type=float, default=600.0, metavar="SECONDS",
                   help="seconds between checkpoints (default 600; 0 = only at the end)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--json", action="store_true", help="print the final metrics as JSON on stdout")
    p.set_defaults(func=cmd_train)


def _load_corpora(specs: list[str], seed: int):
    from bert_core.corpora import load_corpus

    return [load_corpus(spec, seed=seed) for spec in specs]


def _merge(corpora, name: str):
    from bert_core.corpora import Corpus

    if len(corpora) == 1:
        return corpora[0]
    docs = [doc for c in corpora for doc in c.documents]
    return Corpus(name=name, documents=docs, source=" + ".join(c.source for c in corpora))


def _heldout_record(corpus, heldout) -> dict:
    """Which documents of `corpus` were held out: their indices (by identity of content) and sizes."""
    held = {tuple(d) for d in heldout.documents}
    indices = [i for i, d in enumerate(corpus.documents) if tuple(d) in held]
    return {
        "name": corpus.name,
        "source": str(heldout.source),
        "documents": len(corpus.documents),
        "heldout_documents": len(heldout.documents),
        "heldout_sentences": heldout.num_sentences,
        "heldout_document_indices": indices,
    }


def _rank0_tokenizer(train):
    """Train the tokenizer on rank 0 and send it to every rank: the others skip the work, and all ranks are sure
    to share one vocabulary (training is deterministic, but ranks on other machines may run other library versions)."""
    import torch
    import torch.distributed as dist
    from tokenizers import Tokenizer

    from bert_core.tokenization import BertTokenizer

    rank = dist.get_rank()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    tokenizer = train() if rank == 0 else None
    payload = tokenizer.tokenizer.to_str().encode("utf-8") if rank == 0 else b""
    size = torch.tensor([len(payload)], dtype=torch.long, device=device)
    dist.broadcast(size, src=0)
    buffer = torch.zeros(int(size.item()), dtype=torch.uint8, device=device)
    if rank == 0:
        buffer.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    dist.broadcast(buffer, src=0)
    if rank == 0:
        return tokenizer
    return BertTokenizer(Tokenizer.from_str(bytes(buffer.cpu().tolist()).decode("utf-8")))


def build_datasets(specs: list[str], tokenizer, seq_len: int, batch_size: int, mask_rate: float, nsp: bool,
                   seed: int, heldout_fraction: float, world_size: int = 1, train_tokenizer=None):
    """Load corpora, hold out a seeded fraction of each (by document), and build train / held-out data.

    Returns (train_data, eval_data, heldout_by_corpus, tokenizer, record). When `tokenizer` is None one is
    trained on the training part only (vocab size from `train_tokenizer`), so held-out text stays unseen.
    """
    from bert_core.corpora import split_heldout
    from bert_core.pretraining_data import PretrainingData

    corpora = _load_corpora(specs, seed)
    splits = [split_heldout(c, fraction=heldout_fraction, seed=seed) for c in corpora]
    train = _merge([s[0] for s in splits], "+".join(c.name for c in corpora))
    heldout = _merge([s[1] for s in splits], "heldout")
    record = {
        "seed": seed,
        "fraction": heldout_fraction,
        "method": "bert_core.corpora.split_heldout(corpus, fraction, seed) on each corpus",
        "corpora": [{"spec": spec, **_heldout_record(c, s[1])} for spec, c, s in zip(specs, corpora, splits)],
    }
    if tokenizer is None:
        from bert_core.tokenization import train_tokenizer as train_tok

        if world_size > 1:
            tokenizer = _rank0_tokenizer(lambda: train_tok(train.texts(), vocab_size=train_tokenizer or 8000))
        else:
            tokenizer = train_tok(train.texts(), vocab_size=train_tokenizer or 8000)
    common = dict(max_seq_length=seq_len, mask_rate=mask_rate, seed=seed, nsp=nsp)
    # Every rank reads the same global batch and the Trainer gives each its slice of rows, so a run on N
    # processes with batch b is the same computation as one process with batch N*b (and resumes on any N).
    train_data = PretrainingData(train, tokenizer, batch_size=batch_size * world_size, **common)
    eval_data = PretrainingData(heldout, tokenizer, batch_size=batch_size, **common)
    heldout_by_corpus = {spec: s[1] for spec, s in zip(specs, splits)}
    return train_data, eval_data, heldout_by_corpus, tokenizer, record


def _machine() -> dict:
    import torch

    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _command_line(args) -> str:
    prefix = "torchrun ... -m bert_core" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "python -m bert_core"
    return prefix + " " + shlex.join(args.argv)


def _progress_callback(trainer_ref, bar: ProgressBar):
    from bert_core.training import EvalEvent, StepEvent

    def callback(event):
        trainer = trainer_ref[0]
        if isinstance(event, StepEvent):
            prog = trainer.progress
            acc = _pct(event.mlm_acc)
            bar.update(prog.fraction, f"step {event.step} loss {event.loss:.3f} mlm acc {acc} "
                                      f"{event.tokens_per_s:,.0f} tok/s eta {_fmt_seconds(prog.eta_s)}")
        elif isinstance(event, EvalEvent):
            bar.update(trainer.progress.fraction, f"eval step {event.step}: held-out acc {_pct(event.mlm_acc)} "
                                                  f"ppl {event.perplexity:.1f} nsp {_pct(event.nsp_acc)}", force=True)
            if bar.tty:
                bar.stream.write("\n")

    return callback


def cmd_train(args) -> int:
    import torch

    from bert_core.checkpoint import load_checkpoint
    from bert_core.config import BertConfig
    from bert_core.model import BertForPreTraining
    from bert_core.training import Trainer, TrainConfig, init_distributed, shutdown_distributed

    if args.out is None and args.resume is None:
        raise BertCoreError("give --out DIR (where to write the checkpoint) or --resume DIR")
    if not 0 < args.heldout_fraction < 1:
        raise BertCoreError("--heldout-fraction must be between 0 and 1")
    dist_info = init_distributed(args.device)
    try:
        out = args.out or args.resume
        bar = ProgressBar()
        trainer_ref: list = [None]
        callbacks = [_progress_callback(trainer_ref, bar)] if dist_info.is_main else []
        overrides = {}
        if args.steps is not None:
            overrides.update(max_steps=args.steps, time_budget_s=None)
        if args.time_budget is not None:
            overrides.update(time_budget_s=args.time_budget, max_steps=None)
        started = time.time()
        if args.resume is not None:
            ckpt = load_checkpoint(args.resume)
            state = ckpt.trainer_state or {}
            meta = state.get("metadata", {})
            if "corpora" not in meta:
                raise BertCoreError(f"{args.resume} was not written by `train`, so its corpora are unknown")
            cfg = state["train_config"]
            train_data, eval_data, heldout, tokenizer, record = build_datasets(
                meta["corpora"], ckpt.tokenizer, cfg["max_seq_length"], cfg["batch_size"], cfg["mask_rate"],
                cfg["nsp"], cfg["seed"], meta["heldout"]["fraction"], dist_info.world_size)
            if overrides.get("time_budget_s") is not None:
                # A time budget on resume means "this many more seconds".
                overrides["time_budget_s"] += float(state.get("elapsed_s", 0.0))
            if overrides.get("time_budget_s") is not None and cfg.get("schedule") != "time":
                overrides["schedule"] = "time"
            if overrides.get("max_steps") is not None and cfg.get("schedule") == "time":
                overrides["schedule"] = "linear"
            if args.schedule is not None:
                overrides["schedule"] = args.schedule
            trainer = Trainer.resume(args.resume, train_data, eval_data=eval_data, callbacks=callbacks,
                                     checkpoint_dir=out, config_overrides=overrides or None)
            trainer.metadata.setdefault("commands", []).append(_command_line(args))
        else:
            specs = args.corpus or ["toy"]
            tokenizer = None
            if args.tokenizer is not None:
                from bert_core.tokenization import BertTokenizer

                tokenizer = BertTokenizer.load(args.tokenizer)
            start = None
            if args.init_from is not None:
                start = load_checkpoint(args.init_from)
                if start.tokenizer is None:
                    raise BertCoreError(f"{args.init_from} has no tokenizer files; --init-from needs a full checkpoint")
                tokenizer = start.tokenizer
            schedule = args.schedule or ("time" if args.steps is None and args.time_budget else "linear")
            if args.steps is None and args.time_budget is None:
                raise BertCoreError("give --steps N or --time-budget SECONDS")
            config = TrainConfig(
                batch_size=args.batch_size, learning_rate=args.lr, warmup_ratio=args.warmup,
                max_steps=args.steps, time_budget_s=args.time_budget, schedule=schedule,
                weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm, grad_accum=args.grad_accum,
                max_seq_length=args.seq_len, mask_rate=args.mask_rate, nsp=args.nsp, seed=args.seed,
                eval_every=args.eval_every, eval_batches=args.eval_batches,
                checkpoint_every_s=args.checkpoint_every, device=args.device, history_limit=args.history_limit,
            )
            if dist_info.is_main:
                print(f"loading {', '.join(specs)} ...", file=sys.stderr)
            train_data, eval_data, heldout, tokenizer, record = build_datasets(
                specs, tokenizer, args.seq_len, args.batch_size, args.mask_rate, args.nsp, args.seed,
                args.heldout_fraction, dist_info.world_size, train_tokenizer=args.vocab_size)
            overrides_model = {"vocab_size": tokenizer.vocab_size, "max_position_embeddings": max(512, args.seq_len)}
            overrides_model.update(hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
            if args.initializer_range is not None:
                overrides_model["initializer_range"] = args.initializer_range
            model_config = BertConfig.preset(args.preset, **overrides_model)
            if start is not None:
                drop = {k: v for k, v in overrides_model.items() if k.endswith("dropout_prob")}
                model_config = start.model.config.replace(**drop)
                if model_config.max_position_embeddings < args.seq_len:
                    raise BertCoreError(f"{args.init_from} has {model_config.max_position_embeddings} positions, "
                                        f"fewer than --seq-len {args.seq_len}")
            torch.manual_seed(args.seed)  # the same initial weights on every rank and every rerun
            model = BertForPreTraining(model_config)
            if start is not None:
                model.load_state_dict(start.model.state_dict())
            metadata = {
                "corpora": specs,
                "preset": args.preset,
                "heldout": record,
                "commands": [_command_line(args)],
                "unigram_counts": train_data.token_counts.tolist(),
            }
            if start is not None:
                _check_same_heldout(args.init_from, (start.trainer_state or {}).get("metadata", {}).get("heldout"),
                                    record)
                # The run that made the starting weights, so metrics.json names every command behind the model.
                before = (start.trainer_state or {}).get("metadata", {})
                metadata["commands"] = before.get("commands", []) + metadata["commands"]
                metadata["init_from"] = {"folder": str(args.init_from), "step": (start.trainer_state or {}).get("step"),
                                         "preset": before.get("preset"), "corpora": before.get("corpora")}
                metadata["preset"] = before.get("preset", args.preset)
            trainer = Trainer(model, tokenizer, train_data, config, eval_data=eval_data, callbacks=callbacks,
                              checkpoint_dir=out, metadata=metadata)
        trainer_ref[0] = trainer
        if dist_info.is_main:
            n_params = sum(p.numel() for p in trainer.model.parameters())
            print(f"training {n_params / 1e6:.2f}M parameters on {trainer.device} "
                  f"(world size {dist_info.world_size}), writing {out}", file=sys.stderr)
        trainer.run()
        bar.close()
        if trainer.state == "failed":
            print(f"error: {trainer.error}", file=sys.stderr)
            return 1
        if not dist_info.is_main:
            return 0
        metrics = final_metrics(trainer, heldout, time.time() - started)
        if trainer.state == "finished":
            from bert_core.heldout import reproducible_eval

            # The figures a reader can reproduce with `heldout` + `eval` (the commands are recorded beside them).
            metrics["eval"] = reproducible_eval(out)
        _write_metrics(Path(out), metrics)
        if args.json:
            print(json.dumps(metrics, indent=1))
        else:
            print(_metrics_text(metrics))
        return 0
    finally:
        shutdown_distributed()


def _check_same_heldout(folder, before: dict | None, now: dict) -> None:
    """A warm start must hold out the same documents, or its held-out figures would include trained-on text."""
    if not before:
        return

    def key(r):
        return [(c.get("spec"), c.get("heldout_document_indices")) for c in r.get("corpora", [])], r.get("seed"), \
            r.get("fraction")

    if key(before) != key(now):
        specs = ", ".join(c.get("spec", "?") for c in before.get("corpora", []))
        raise BertCoreError(f"{folder} was trained with another held-out split (corpora {specs}, seed "
                            f"{before.get('seed')}, fraction {before.get('fraction')}); use the same --corpus list, "
                            "--seed and --heldout-fraction so that its held-out text stays unseen")


def _baselines(trainer) -> dict:
    """The trainer's baselines; after --init-from its step-0 evaluation is the starting checkpoint, so it is
    recorded as "start" (with where it came from), not as "untrained"."""
    baselines = dict(trainer.baselines)
    source = trainer.metadata.get("init_from")
    if source and "untrained" in baselines:
        baselines["start"] = {**baselines.pop("untrained"), "model": source}
    return baselines


def final_metrics(trainer, heldout_by_corpus: dict, wall_s: float) -> dict:
    """metrics.json: held-out figures (overall and per corpus) beside the baselines, time, machine, command."""
    from bert_core.evaluation import evaluate, unigram_baseline_for
    from bert_core.pretraining_data import PretrainingData
    from bert_core.training import _unwrap

    cfg = trainer.config
    final = trainer.evals[-1] if trainer.evals else None
    per_corpus = {}
    for name, corpus in heldout_by_corpus.items():
        try:
            data = PretrainingData(corpus, trainer.tokenizer, max_seq_length=cfg.max_seq_length,
                                   batch_size=cfg.batch_size, mask_rate=cfg.mask_rate, seed=cfg.seed, nsp=cfg.nsp)
            batches = data.eval_batches(cfg.eval_batches, seed=cfg.seed)
            result = evaluate(_unwrap(trainer.model), batches, device=trainer.device)
            per_corpus[name] = {**result.to_dict(), "baselines": unigram_baseline_for(trainer.data, batches)}
        except BertCoreError as e:
            per_corpus[name] = {"error": str(e)}
    return {
        "heldout": {
            "masked_token_accuracy": final.mlm_acc if final else None,
            "mlm_loss": final.mlm_loss if final else None,
            "perplexity": final.perplexity if final else None,
            "nsp_accuracy": final.nsp_acc if final else None,
            "step": final.step if final else None,
        },
        "baselines": _baselines(trainer),
        "per_corpus": per_corpus,
        "heldout_split": trainer.metadata.get("heldout"),
        "steps": trainer.step,
        "tokens_seen": trainer.tokens_seen,
        "training_time_s": trainer.elapsed_s,
        "wall_time_s": wall_s,
        "world_size": trainer.dist.world_size,
        "device": str(trainer.device),
        "machine": _machine(),
        "train_config": cfg.to_dict(),
        "commands": trainer.metadata.get("commands", []),
    }


def _write_metrics(folder: Path, metrics: dict) -> None:
    from bert_core.checkpoint import write_json

    tmp = folder / ".metrics.json.tmp"
    write_json(tmp, metrics)
    os.replace(tmp, folder / "metrics.json")


def _metrics_text(m: dict) -> str:
    h, b = m["heldout"], m["baselines"]
    uni = b.get("unigram", {})
    label = "start" if "start" in b else "untrained"
    first = b.get(label, {})
    rows = [
        f"held-out after {m['steps']} steps ({_fmt_seconds(m['training_time_s'])}):",
        f"  masked-token accuracy {_pct(h['masked_token_accuracy'])}   (unigram baseline {_pct(uni.get('accuracy'))}, "
        f"{label} {_pct(first.get('mlm_acc'))})",
        f"  MLM perplexity        {h['perplexity']:.1f}   (unigram {uni.get('perplexity', float('nan')):.1f}, "
        f"{label} {first.get('perplexity', float('nan')):.1f})" if h["perplexity"] is not None else "",
        f"  NSP accuracy          {_pct(h['nsp_accuracy'])}   (chance 50%)",
    ]
    return "\n".join(r for r in rows if r)


# ---------------------------------------------------------------------------------------------- eval


def _add_eval(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint on a text file (seeded masking)",
                       description="Masked-token accuracy, MLM perplexity and NSP accuracy of a checkpoint on a "
                                   "text file, with seeded masking, beside the unigram baseline.")
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint folder")
    p.add_argument("--text-file", type=Path, required=True, help="plain text to evaluate on")
    p.add_argument("--seed", type=int, default=0, help="seed of the masking and NSP pairs")
    p.add_argument("--batches", type=int, default=50, help="maximum number of batches to evaluate")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=None, help="default: the checkpoint's training length or 128")
    p.add_argument("--mask-rate", type=float, default=0.15)
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_eval)


def evaluate_text_file(checkpoint, text_file, seed=0, batches=50, batch_size=32, seq_len=None, mask_rate=0.15,
                       device="auto") -> dict:
    """Evaluate a checkpoint on a text file; returns the figures and the unigram baseline as a dict."""
    import torch

    from bert_core.checkpoint import load_checkpoint
    from bert_core.corpora import load_corpus
    from bert_core.evaluation import evaluate
    from bert_core.pretraining_data import PretrainingData, unigram_baseline
    from bert_core.training import resolve_device

    if not Path(text_file).is_file():
        raise BertCoreError(f"text file {text_file} does not exist")
    ckpt = load_checkpoint(checkpoint)
    if ckpt.tokenizer is None:
        raise BertCoreError(f"{checkpoint} has no tokenizer files (tokenizer.json or vocab.txt)")
    state = ckpt.trainer_state or {}
    if seq_len is None:
        seq_len = state.get("train_config", {}).get("max_seq_length", 128)
    seq_len = min(seq_len, ckpt.model.config.max_position_embeddings)
    corpus = load_corpus(str(text_file), seed=seed)
    data = PretrainingData(corpus, ckpt.tokenizer, max_seq_length=seq_len, batch_size=batch_size,
                           mask_rate=mask_rate, seed=seed)
    eval_batches = data.eval_batches(batches, seed=seed)
    dev = resolve_device(device)
    result = evaluate(ckpt.model.to(dev), eval_batches, device=dev)
    counts_list = state.get("metadata", {}).get("unigram_counts")
    never = ckpt.tokenizer.special_ids - {ckpt.tokenizer.unk_id}
    if counts_list and len(counts_list) == ckpt.tokenizer.vocab_size:
        counts, source = torch.tensor(counts_list), "the checkpoint's training text"
    else:
        counts, source = data.token_counts, "the evaluated text itself (the checkpoint records no training counts)"
    baseline = dict(unigram_baseline(counts, eval_batches, never_ids=never))
    return {
        "checkpoint": str(checkpoint),
        "text_file": str(text_file),
        "seed": seed,
        "masked_token_accuracy": result.mlm_acc,
        "mlm_loss": result.mlm_loss,
        "perplexity": result.perplexity,
        "nsp_accuracy": result.nsp_acc,
        "accuracy_by_decision": result.acc_by_decision,
        "masked_tokens": result.num_masked,
        "sequences": result.num_sequences,
        "unigram_baseline": {**baseline, "counts_from": source},
    }


def cmd_eval(args) -> int:
    r = evaluate_text_file(args.checkpoint, args.text_file, seed=args.seed, batches=args.batches,
                           batch_size=args.batch_size, seq_len=args.seq_len, mask_rate=args.mask_rate,
                           device=args.device)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    u = r["unigram_baseline"]
    print(f"{r['text_file']}: {r['masked_tokens']} masked tokens in {r['sequences']} sequences (seed {r['seed']})")
    print(f"masked-token accuracy {_pct(r['masked_token_accuracy'])}   unigram baseline {_pct(u.get('accuracy'))}")
    print(f"MLM perplexity        {r['perplexity']:.1f}   unigram baseline {u.get('perplexity', float('nan')):.1f}")
    print(f"NSP accuracy          {_pct(r['nsp_accuracy'])}   chance 50%")
    return 0


# ---------------------------------------------------------------------------------------------- fill-mask


def _add_fill_mask(sub) -> None:
    p = sub.add_parser("fill-mask", help="top-k predictions for each [MASK] in a text",
                       description="Print the checkpoint's top-k candidates for every [MASK] in TEXT.")
    p.add_argument("--checkpoint", type=Path, default=None, help="checkpoint folder (default: the shipped model)")
    p.add_argument("text", help='text with one or more [MASK], e.g. "the cat sat on the [MASK] ."')
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fill_mask)


def cmd_fill_mask(args) -> int:
    from bert_core.checkpoint import load_checkpoint
    from bert_core.inspection import fill_mask
    from bert_core.paths import DEFAULT_CHECKPOINT

    folder = args.checkpoint or DEFAULT_CHECKPOINT
    ckpt = load_checkpoint(folder)
    if ckpt.tokenizer is None:
        raise BertCoreError(f"{folder} has no tokenizer files (tokenizer.json or vocab.txt)")
    predictions = fill_mask(ckpt.model, ckpt.tokenizer, args.text, top_k=args.top_k)
    if args.json:
        print(json.dumps([{"position": p.position, "candidates": [{"token": t, "prob": pr} for t, pr in p.candidates]}
                          for p in predictions], indent=1))
        return 0
    for i, p in enumerate(predictions, 1):
        cands = "  ".join(f"{t} {pr:.3f}" for t, pr in p.candidates)
        print(f"[MASK] {i} (token {p.position}): {cands}")
    return 0


# ---------------------------------------------------------------------------------------------- lazy subcommands


def _add_lazy(sub, module_name: str) -> None:
    """Register the subcommand defined by bert_core.<module_name> (add_parser / run) if that module exists."""
    try:
        module = importlib.import_module(f"bert_core.{module_name}")
    except ModuleNotFoundError as e:
        if e.name == f"bert_core.{module_name}":
            return
        raise
    runner = getattr(module, "run", None) or getattr(module, "run_bench", None)
    if not hasattr(module, "add_parser") or runner is None:
        return
    p = module.add_parser(sub)

    def func(args):
        result = runner(args)
        return result if isinstance(result, int) else 0  # run_bench returns its figures (already printed)

    p.set_defaults(func=func)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's usage + error, but on one line that starts with "error:"
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argparse tree of `python -m bert_core`."""
    parser = _Parser(prog="python -m bert_core", description="BERT from scratch: pretrain, evaluate, inspect.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_train(sub)
    _add_eval(sub)
    _add_fill_mask(sub)
    _add_lazy(sub, "bench")
    _add_lazy(sub, "finetune")
    _add_lazy(sub, "heldout")
    return parser


# Commands whose process trains and then exits keep freed memory for reuse (see bert_core.allocator; `python -m
# bert_core` has also restarted them with malloc's huge pages). `bench` applies it itself, with a flag to compare
# without it.
_KEEPS_FREED_MEMORY = set(TRAINING_COMMANDS) - {"bench"}


def main(argv=None) -> int:
    """Entry point: parse, run, and turn user errors into one `error:` line with exit status 2."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # recorded in trainer_state.json / metrics.json as the exact command
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command in _KEEPS_FREED_MEMORY:
        keep_freed_memory()
    try:
        return int(args.func(args) or 0)
    except BertCoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
