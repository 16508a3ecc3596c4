"""The run panel the Train and Fine-tune pages share, as words and decisions (no Streamlit, no torch): what is said
of a run before its figures, its share link, its Stop and Reset buttons' words; each page's in `PanelWords`."""

from __future__ import annotations

from dataclasses import dataclass

from bert_core.serve.jobs import format_duration
from bert_core.serve.run_protocols import FINETUNE_PAGE, TRAIN_PAGE
from bert_core.app.visitor_runs import LINK_PARAMS


@dataclass(frozen=True)
class PanelWords:
    """How a page names its run in the panel."""

    page: str           # run_protocols' page name: which of the tab's runs, and which share link
    noun: str           # "run", "race"
    whose: str          # what the queue counts runs ahead of: "yours", "this race"
    doing: str          # "Training failed: ...", "Fine-tuning ended: ..."
    paused: str         # said of a queued run that has trained already ({step}: its step)
    stop_help: str
    stopping: str       # said while Stop waits for the step under way
    reset_help: str
    share_caption: str

    @property
    def share_title(self) -> str:
        return f"Share this {self.noun} with a class"

    def share_link(self, base_url: str, view_id: str) -> str:
        """The link that watches the run without steering it (`base_url`: the page's address, its query dropped)."""
        return f"{base_url.split('?')[0]}?{LINK_PARAMS[self.page][1]}={view_id}"


TRAIN_WORDS = PanelWords(
    page=TRAIN_PAGE, noun="run", whose="yours", doing="Training",
    paused="Its turn was up, so it paused at step {step:,} and continues where it stopped when its turn comes "
           "again. ",
    stop_help="Stop the run at the next step (a queued run that has not started is cancelled)",
    stopping="Stopping: the run ends after the step it is on…",
    reset_help="Forget this tab's run and its model: it leaves *My runs* too, and its link stops working. To keep a "
               "model, save it on the server (or download it) first.",
    share_caption="Everyone who opens this link watches this run live: its curves, probes and progress, and on the "
                  "Attention and Predictions pages its current model, each with their own sentences. They cannot "
                  "stop, reset or resume it. Your own address bar holds the run's private link (`?run=...`): "
                  "reloading or reopening it brings you back to this run.")

FINETUNE_WORDS = PanelWords(
    page=FINETUNE_PAGE, noun="race", whose="this race", doing="Fine-tuning",
    paused="Its turn was up, so it paused after the model it was training; it goes on with the next one when its "
           "turn comes again. ",
    stop_help="Stop the model in training after its current step and skip the rest (a queued race that has not "
              "started is cancelled)",
    stopping="Stopping: the model in training ends after the step it is on…",
    reset_help="Forget this tab's race and its models: it leaves *My runs* too, and its link stops working.",
    share_caption="Everyone who opens this link watches this race live, and then tries its fine-tuned models on "
                  "their own sentences. They cannot stop or reset it. Your own address bar holds the race's private "
                  "link (`?ft=...`): reloading or reopening it brings you back here.")


@dataclass(frozen=True)
class Notice:
    """One thing said of a run: `level` is info, warning or error."""

    level: str
    text: str
    icon: str | None = None


def status_notices(run, words: PanelWords, viewer: bool, place: tuple[int, float] | None) -> list[Notice]:
    """What the panel says of `run` before its figures: how it was ended, a record a full disk refused (a restart
    would lose it), and its queue place (`place`: runs ahead, estimated wait) or how its training failed or ended. A
    viewer is not told that Stop cancels it: they cannot stop it."""
    said = []
    if run.note:
        said.append(Notice("warning", f"This {words.noun} was {run.note}."))
    if run.record_failed:
        said.append(Notice("warning", run.record_failed, ":material/hard_drive:"))
    job = run.job
    if run.phase == "queued" and place is not None:
        ahead, wait = place
        paused = (words.paused.format(step=job.trainer.step) if job is not None and job.trainer is not None
                  else "")
        said.append(Notice("info", f"**Queued**: {ahead} run(s) ahead of {words.whose}, estimated wait "
                                   f"{format_duration(wait)}. {paused}It starts by itself"
                                   + ("." if viewer else "; *Stop* cancels it."), ":material/schedule:"))
    elif job is not None and job.error:
        said.append(Notice("error", f"{words.doing} failed: {job.error}"))
    elif job is not None and job.ended_note:
        said.append(Notice("warning", f"{words.doing} ended: {job.ended_note}."))
    return said


def waiting(run) -> bool:
    """True when a queued run has nothing more to draw: it has not trained yet."""
    return run.phase == "queued" and (run.job is None or run.job.trainer is None)
