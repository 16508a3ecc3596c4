"""A process job whose training process died is released into the folder where the process wrote its safety-net
checkpoints (issue #61, fault b): it keeps that checkpoint only when it holds trained weights. One written before
the first update (step 0) is nothing kept, so the pages say the model is lost instead of offering to train on from
untrained weights."""

import threading
from types import SimpleNamespace

import pytest

from bert_core.model.bert import BertForPreTraining
from bert_core.model.checkpoint import save_checkpoint
from bert_core.model.config import BertConfig
from bert_core.serve.training_process import ProcessModel


class DeadJob(ProcessModel):
    """A ProcessModel whose training process has died after `step` updates (what release reads of a job)."""

    busy = False

    def __init__(self, step: int):
        self.trainer = SimpleNamespace(step=step)
        self._child = SimpleNamespace(alive=lambda: False)
        self.released, self._snapshot, self._kept = None, None, None
        self._release_lock = threading.Lock()
        self.snapshot_step = None   # no weights ever fetched from the process
        self.error, self.ended_note = "its process ended (exit code -9)", None
        self.closed = False

    def close(self, wait: float = 10.0) -> None:
        self.closed = True


@pytest.mark.parametrize("written_at, kept", [(0, False), (2, True)])
def test_a_dead_run_keeps_its_last_checkpoint_only_when_it_is_past_step_0(tmp_path, written_at, kept):
    folder = tmp_path / "checkpoint"
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=50, max_position_embeddings=16))
    save_checkpoint(folder, model, trainer_state={"step": written_at})
    job = DeadJob(step=3)
    job.release(folder)
    assert job.closed
    assert job.model_available is kept
    if kept:
        assert job.released == folder.resolve() and job.kept_step == written_at
    else:
        assert job.released is None and job.kept_step is None
        assert "This run's model is lost" in job.lost_message()
