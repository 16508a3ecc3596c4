"""The Train page's "What each size reaches" (recipes.ladder_rows / ladder_note) reads the measured preset ladder:
each size's held-out [MASK] accuracy per budget as a multiple of the unigram line, and where and how it was
measured, the precision included."""

from bert_core.training import recipes

ROWS = [
    {"preset": "nano", "device": "cpu", "precision": "bf16", "budget_s": 60.0, "masked_accuracy": 0.08,
     "unigram_accuracy": 0.05, "steps": 2000},
    {"preset": "nano", "device": "cpu", "precision": "bf16", "budget_s": 300.0, "masked_accuracy": 0.2,
     "unigram_accuracy": 0.05, "steps": 9000},
    {"preset": "mini", "device": "cpu", "precision": "bf16", "budget_s": 300.0, "masked_accuracy": 0.11,
     "unigram_accuracy": 0.05, "steps": 5000},
    {"preset": "mini", "device": "cuda", "precision": "bf16", "budget_s": 45.0, "masked_accuracy": 0.13,
     "unigram_accuracy": 0.05, "steps": 1400},
]


def _data(rows):
    return {"machine": "AMD EPYC, 2 cores", "date": "2026-11-27", "corpus": "WikiText-2", "rows": rows}


def test_rows_are_per_size_and_per_device(monkeypatch):
    monkeypatch.setattr(recipes, "ladder", lambda: _data(ROWS))
    assert recipes.ladder_rows() == [{"size": "nano", "1 min": "8.0% (1.60x)", "5 min": "20.0% (4.00x)"},
                                     {"size": "mini", "5 min": "11.0% (2.20x)"}]
    assert recipes.ladder_rows("cuda") == [{"size": "mini", "45 s": "13.0% (2.60x)"}]


def test_the_note_names_the_machine_and_says_bf16_only_when_every_cpu_row_was(monkeypatch):
    monkeypatch.setattr(recipes, "ladder", lambda: _data(ROWS))
    note = recipes.ladder_note()
    assert "AMD EPYC, 2 cores, 2026-11-27; bf16 autocast" in note
    mixed = [dict(ROWS[0], precision="fp32"), *ROWS[1:]]
    monkeypatch.setattr(recipes, "ladder", lambda: _data(mixed))
    assert "bf16" not in recipes.ladder_note()
    monkeypatch.setattr(recipes, "ladder", lambda: {})
    assert "No measurements" in recipes.ladder_note()


def test_the_shipped_ladder_file_reads():
    data = recipes.ladder()
    assert data and {"nano", "tiny", "mini", "small"} <= {row["size"] for row in recipes.ladder_rows()}
