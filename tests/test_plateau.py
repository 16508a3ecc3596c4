"""A run still at the unigram line after a good share of its budget says so (bert_core.training.plateau), judged at the
[MASK]ed positions: overall accuracy can rise by copying the kept tokens while [MASK] stays on the line."""

import json
from types import SimpleNamespace

from bert_core.cli.main import main
from bert_core.training.plateau import CHECK_AFTER, plateau_warning

BASELINES = {"unigram": {"accuracy": 0.055, "perplexity": 900.0}}


def _history(masked, kept=0.05, n=60):
    return [SimpleNamespace(mlm_acc_masked=masked, mlm_acc_kept=kept, mlm_acc=masked * 0.8 + kept * 0.2)
            for _ in range(n)]


def test_the_warning_speaks_at_the_line_after_its_share_of_the_run_and_not_before_or_above():
    on_line = _history(0.056, kept=0.6)  # overall accuracy well above the line, from copying kept tokens only
    assert plateau_warning(on_line, BASELINES, CHECK_AFTER - 0.01) is None
    warning = plateau_warning(on_line, BASELINES, 0.5)
    assert warning and "unigram plateau" in warning and "[MASK]" in warning and "learning rate" in warning
    assert plateau_warning(_history(0.09), BASELINES, 0.5) is None          # 1.6x the line: learning
    assert plateau_warning(on_line, {}, 0.5) is None                        # no baseline: nothing to say
    assert plateau_warning(on_line[:3], BASELINES, 0.5) is None             # too few steps to judge
    gpt = [SimpleNamespace(mlm_acc_masked=None, mlm_acc=0.05) for _ in range(60)]
    assert "next-token" in plateau_warning(gpt, BASELINES, 0.5, causal=True)


def test_a_run_stuck_on_the_line_says_so_in_the_cli_log_and_its_metrics(tmp_path, capsys):
    from bert_core.data.corpora import generate_toy_corpus

    corpus = generate_toy_corpus(num_documents=80, seed=1)
    text = tmp_path / "toy.txt"
    text.write_text("\n\n".join("\n".join(doc) for doc in corpus.documents) + "\n")
    # A rate far too low for any size: the model cannot leave the line in 100 steps.
    out = tmp_path / "stuck"
    code = main(["train", "--corpus", str(text), "--vocab-size", "300", "--seq-len", "32", "--batch-size", "8",
                 "--steps", "100", "--lr", "1e-7", "--eval-batches", "2", "--device", "cpu", "--out", str(out)])
    assert code == 0
    err = capsys.readouterr().err
    assert "warning: after" in err and "unigram plateau" in err
    assert "unigram plateau" in json.loads((out / "metrics.json").read_text())["warnings"][0]
