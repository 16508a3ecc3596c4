"""evaluation.MlmStats: the named sums that a training step and a held-out evaluation both report, by hand count."""

import math

import torch

from bert_core.data.pretraining_data import KEPT, MASKED, NOT_CHOSEN, RANDOM
from bert_core.model.bert import IGNORE_INDEX
from bert_core.training.evaluation import MlmStats, batch_stats


def test_batch_stats_count_by_decision_and_read_back_with_names():
    labels = torch.tensor([[IGNORE_INDEX, 5, 6, IGNORE_INDEX], [7, IGNORE_INDEX, 8, 9]])
    decisions = torch.tensor([[NOT_CHOSEN, MASKED, RANDOM, NOT_CHOSEN], [MASKED, NOT_CHOSEN, KEPT, MASKED]])
    # One row of logits per predicted position (row-major): guesses 5 (right), 0, 7 (right), 8 (right), 0.
    guesses = torch.tensor([5, 0, 7, 8, 0])
    logits = torch.nn.functional.one_hot(guesses, 10).float()
    nsp_logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    nsp_labels = torch.tensor([0, 0])
    attention = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    vec = batch_stats(logits, labels, decisions, torch.tensor(3.0), nsp_logits, nsp_labels, torch.tensor(1.5),
                      attention)
    s = MlmStats.from_tensor(vec + vec)  # two identical batches add up
    assert (s.masked, s.correct, s.sequences, s.tokens) == (10, 6, 4, 14)
    assert (s.masked_n, s.masked_correct, s.random_n, s.random_correct, s.kept_n, s.kept_correct) == (6, 4, 2, 0, 2, 2)
    assert s.mlm_loss == 0.6 and s.mlm_acc == 0.6 and math.isclose(s.perplexity, math.exp(0.6))
    assert s.acc_by_decision() == {"masked": 4 / 6, "random": 0.0, "kept": 1.0}
    assert s.nsp_acc == 0.5 and s.nsp_loss == 0.75


def test_without_nsp_labels_the_nsp_figures_are_empty():
    labels = torch.tensor([[IGNORE_INDEX, 3]])
    vec = batch_stats(torch.nn.functional.one_hot(torch.tensor([3]), 5).float(), labels,
                      torch.tensor([[NOT_CHOSEN, KEPT]]), torch.tensor(0.1))
    s = MlmStats.from_tensor(vec)
    assert s.nsp_correct == 0 and s.tokens == 0 and s.sequences == 1 and s.mlm_acc == 1.0
    assert s.acc_by_decision() == {"masked": None, "random": None, "kept": 1.0}
