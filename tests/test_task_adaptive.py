"""benchmarks/task_adaptive.py: task-adaptive pretraining continues a checkpoint on a split's training rows, so
the rows it writes must be exactly the rows `finetune` trains on at that seed, and never a validation row."""

from bert_core.data.classification_data import load_classification_csv
from bert_core.training.finetune import split_task
from tests.script_loading import load_script


def test_the_continuation_text_holds_the_training_rows_and_no_validation_row(tmp_path):
    rows = [f"{i % 2},Row number {i} is here. It has a second sentence about item {i}." for i in range(60)]
    data = load_classification_csv(("label,text\n" + "\n".join(rows) + "\n").encode(), name="rows.csv")
    out = tmp_path / "rows.txt"
    written = load_script("benchmarks/task_adaptive.py").write_training_texts(data, seed=3, val_size=12, path=out)
    split = split_task(data, None, 12, 3)
    documents = out.read_text().strip().split("\n\n")
    assert written == len(documents) == 48
    # each row is one document, a sentence a line, in the training split's order
    assert documents == ["\n".join([f"Row number {t.split()[2]} is here.", t.split(". ", 1)[1]])
                         for t in split.train_data.texts]
    val_numbers = {t.split()[2] for t in split.val_data.texts}
    assert len(val_numbers) == 12
    assert not val_numbers & {d.split()[2] for d in documents}
