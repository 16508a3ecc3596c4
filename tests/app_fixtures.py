"""A real, small checkpoint for the explorer's tests: a nano BERT trained a few steps on the toy corpus."""

from pathlib import Path


def train_nano_checkpoint(folder: Path, documents: int = 60, steps: int = 3, batch_size: int = 4,
                          seq_len: int = 32, vocab_size: int = 300, max_positions: int = 48) -> Path:
    """Train and save (model, tokenizer, trainer state with unigram counts) into `folder`; return it."""
    import torch

    from bert_core.data.corpora import generate_toy_corpus
    from bert_core.data.pretraining_data import PretrainingData
    from bert_core.model.bert import BertForPreTraining
    from bert_core.model.config import BertConfig
    from bert_core.model.tokenization import train_tokenizer
    from bert_core.training.trainer import Trainer
    from bert_core.training.train_config import TrainConfig

    corpus = generate_toy_corpus(num_documents=documents, seed=0)
    tok = train_tokenizer(corpus.texts(), vocab_size=vocab_size)
    data = PretrainingData(corpus, tok, max_seq_length=seq_len, batch_size=batch_size)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tok.vocab_size,
                                                 max_position_embeddings=max_positions))
    config = TrainConfig(max_steps=steps, batch_size=batch_size, max_seq_length=seq_len, device="cpu",
                         eval_batches=1)
    trainer = Trainer(model, tok, data, config, eval_data=data,
                      metadata={"corpora": ["toy"], "unigram_counts": data.token_counts.tolist()})
    trainer.run()
    assert trainer.state == "finished", trainer.error
    trainer.save(folder)
    return folder


def crashing_builder():
    """A trainer builder for the training-process tests that kills its process outright (as an OOM kill would)."""
    import os

    os._exit(7)


def failing_builder():
    """A trainer builder that fails the way a bad corpus does, with a user-facing message."""
    from bert_core.errors import BertCoreError

    raise BertCoreError("the corpus file is empty: give some text")


RUN_WAIT_S = 900   # a hang guard only: the waits below end on the run's own events, however busy the machine


def finish_page_run(at, param: str = "ft"):
    """Wait for the run a page started (its id in the URL's `param`: `ft` for a race, `run` for a pretraining run)
    to end, then draw the page again; returns its job. Waits on the job's own end, not on the clock: a race takes
    seconds on a quiet machine and minutes on one loaded 30 deep."""
    import time

    from bert_core.app.app_state import RUNS

    token = at.query_params[param]
    run = RUNS.get(token[0] if isinstance(token, list) else token)
    assert run is not None, f"no run for ?{param}="
    # A run the scheduler has just created has no job, or one that is 'new', whose wait() returns at once.
    for _ in range(int(RUN_WAIT_S / 0.05)):
        if run.job is not None and run.job.phase != "new":
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the run of ?{param}= was never started")
    assert run.job.wait(RUN_WAIT_S), f"the run of ?{param}= did not end within {RUN_WAIT_S} s"
    at.run()
    return run.job
