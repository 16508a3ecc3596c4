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
    from bert_core.training.trainer import TrainConfig, Trainer

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
