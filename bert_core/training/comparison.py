"""One knob at a time: the Train page's run settings (`jobs.TrainSpec`) as named knobs, what differs between two
runs, a copy of a run with one knob changed, and the `python -m bert_core train` command that repeats a run.

Streamlit-free and torch-free at import (the figures module, which draws before torch loads, uses it).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from bert_core.data.corpora import HELDOUT_FRACTION
from bert_core.data.objectives import objective_settings
from bert_core.errors import BertCoreError
from bert_core.model.config import ATTENTION_KINDS, PRESETS, BertConfig, feed_forward_width
from bert_core.training.run_settings import SETTINGS, SIZE_FIELDS, flag
from bert_core.training.setting import ALWAYS as ALWAYS_WRITTEN
from bert_core.training.setting import NEVER, Setting
from bert_core.training.train_config import TRAIN_DEFAULTS, TRAIN_SETTINGS, TrainConfig, change_text, default_recipe
from bert_core.training.train_spec import validate_spec


@dataclass(frozen=True)
class Knob:
    """One setting a student changes to see what it buys: how to read it from a spec, write it, and say it."""

    name: str
    label: str
    get: Callable[[Any], Any]
    put: Callable[[Any, Any], Any]                   # (spec, value) -> a new spec
    show: Callable[[Any], str]
    parse: Callable[[Any], Any]                      # a value as given (a widget's, a string) -> the knob's value
    suggestions: Callable[[Any], tuple] = lambda current: ()

    def describe(self, before, after) -> str:
        """'mask rate 0.15 → 0.4'."""
        return f"{self.label} {self.show(before)} → {self.show(after)}"


@dataclass(frozen=True)
class KnobChange:
    """One knob that differs between two runs, with both values and its label."""

    knob: str
    before: Any
    after: Any
    label: str


_MODEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(BertConfig)}   # as train_config.TRAIN_DEFAULTS


def _with_train(spec, **changes):
    return dataclasses.replace(spec, train={**spec.train, **changes})


# -- model size: a preset's name, or its four sizes when they are set one by one ------------------------------
def model_sizes(spec) -> tuple[int, int, int, int]:
    """(layers, hidden, heads, feed-forward) of the model a spec builds."""
    base = {**PRESETS[spec.preset]}
    base.update({k: v for k, v in spec.model_overrides.items() if k in SIZE_FIELDS})
    if "intermediate_size" not in spec.model_overrides:
        base["intermediate_size"] = feed_forward_width(base["hidden_size"])
    return tuple(int(base[k]) for k in SIZE_FIELDS)


def _preset_sizes(name: str) -> tuple[int, int, int, int]:
    p = PRESETS[name]
    return p["num_hidden_layers"], p["hidden_size"], p["num_attention_heads"], feed_forward_width(p["hidden_size"])


def _size_value(spec):
    sizes = model_sizes(spec)
    names = [spec.preset] + [p for p in PRESETS if p != spec.preset]
    return next((p for p in names if _preset_sizes(p) == sizes), sizes)


def _size_put(spec, value):
    overrides = {k: v for k, v in spec.model_overrides.items() if k not in SIZE_FIELDS}
    if isinstance(value, str):
        return _growth_that_fits(dataclasses.replace(spec, preset=value, model_overrides=overrides))
    return _growth_that_fits(dataclasses.replace(spec, model_overrides={**overrides, **dict(zip(SIZE_FIELDS, value))}))


def _growth_that_fits(spec):
    """A run that starts small changed to a size that cannot grow from its start size (nano) trains at the new size
    from the first step."""
    train = spec.train
    if not train.get("grow_fraction"):
        return spec
    try:
        BertConfig.preset(spec.preset, vocab_size=128, **spec.model_overrides).growth_start(
            train["grow_from_hidden"], train["grow_from_layers"])
    except (BertCoreError, KeyError):
        return dataclasses.replace(spec, train={**train, "grow_fraction": 0.0})
    return spec


def _size_parse(value):
    if isinstance(value, str) and value in PRESETS:
        return value
    if isinstance(value, dict):
        value = tuple(value.get(k) for k in SIZE_FIELDS)
    if isinstance(value, (tuple, list)) and len(value) == 4 and all(isinstance(v, int) and v > 0 for v in value):
        BertConfig(vocab_size=128, **dict(zip(SIZE_FIELDS, value)))  # heads must divide the hidden size, ...
        sizes = tuple(value)
        return next((p for p in PRESETS if _preset_sizes(p) == sizes), sizes)
    raise BertCoreError(f"model size must be a preset ({', '.join(PRESETS)}) or four sizes (layers, hidden, heads, "
                        f"feed-forward), got {value!r}")


def _size_show(value) -> str:
    if isinstance(value, str):
        return value
    layers, hidden, heads, ffn = value
    return f"{layers}x{hidden} ({heads} heads, ffn {ffn})"


# -- corpus ---------------------------------------------------------------------------------------------------
def _corpus_put(spec, value):
    label = value if "/" not in value and "\\" not in value else re.split(r"[\\/]", value)[-1]
    return dataclasses.replace(spec, corpus=value, corpus_label=label)


def _corpus_parse(value):
    if not isinstance(value, str) or not value.strip():
        raise BertCoreError(f"corpus must be a name (toy, tinyshakespeare, wikitext-2, brown) or a text file, "
                            f"got {value!r}")
    return value.strip()


# -- attention: bidirectional (BERT, masked LM) or causal (GPT, next-token LM) ---------------------------------
def _attention_put(spec, value):
    # The objective decides the attention (the model is made causal from it); a GPT has no NSP (IMPLIED).
    new = dataclasses.replace(spec, model_overrides={k: v for k, v in spec.model_overrides.items()
                                                     if k != "attention"})
    return _with_train(new, **objective_settings("clm" if value == "causal" else "mlm"))


def _attention_parse(value):
    if value not in ATTENTION_KINDS:
        raise BertCoreError(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {value!r}")
    return value


def _train_knob(setting: Setting) -> Knob:
    """The knob of a TrainConfig setting described as one (its `knob`: bert_core.training.train_config)."""
    name, face = setting.name, setting.knob
    return Knob(name, setting.legend(), lambda spec: spec.train.get(name, TRAIN_DEFAULTS[name]),
                lambda spec, v: _with_train(spec, **{name: v}), face.show, face.parse, face.suggestions)


# The knobs that are not one config field: the attention (with the objective), the model's size, the corpus.
_OWN_KNOBS = (
    (0, Knob("attention", "attention", lambda spec: "causal" if is_causal(spec) else "bidirectional", _attention_put,
             {"bidirectional": "bidirectional (BERT)", "causal": "causal (GPT)"}.get, _attention_parse,
             lambda current: ("causal",) if current == "bidirectional" else ("bidirectional",))),
    (5, Knob("model_size", "model size", _size_value, _size_put, _size_show, _size_parse,
             lambda current: tuple(p for p in ("nano", "tiny", "mini") if p != current))),
    (7, Knob("corpus", "corpus", lambda spec: spec.corpus, _corpus_put, str, _corpus_parse,
             lambda current: tuple(c for c in ("toy", "tinyshakespeare", "wikitext-2") if c != current))),
)
# Every knob, in the order a legend and the 'try one change' menu list them.
KNOBS: dict[str, Knob] = {k.name: k for _, k in sorted(
    [*_OWN_KNOBS, *((s.knob.at, _train_knob(s)) for s in TRAIN_SETTINGS if s.knob)], key=lambda pair: pair[0])}


# Knobs another knob's change may carry along: causal attention (GPT's next-token objective) turns NSP off.
IMPLIED = {"attention": {"nsp"}}
# Knobs of BERT's masked-LM objective only (their descriptions' `mlm_only`).
MLM_ONLY = tuple(s.name for s in TRAIN_SETTINGS if s.knob and s.knob.mlm_only)


def _knob(name: str) -> Knob:
    if name not in KNOBS:
        raise BertCoreError(f"unknown knob {name!r}: use one of {', '.join(KNOBS)}")
    return KNOBS[name]


def knob_value(spec, knob: str):
    """The value of one knob in a spec."""
    return _knob(knob).get(spec)


def knob_diff(spec_a, spec_b) -> list[KnobChange]:
    """The knobs whose values differ from run a to run b, in KNOBS order (the other settings: other_differences)."""
    changes = []
    for knob in KNOBS.values():
        before, after = knob.get(spec_a), knob.get(spec_b)
        if before != after:
            changes.append(KnobChange(knob.name, before, after, knob.describe(before, after)))
    return changes


# Settings that are not knobs, with the words the legend uses for them.
_OTHER_LABELS = {**{name: s.label for name, s in SETTINGS.items() if s.label},
                 "hidden_dropout_prob": SETTINGS["dropout"].legend()}
_NOT_SETTINGS = {"probe_every", "checkpoint_every_s", "history_limit", "device", "precision", "eval_every",
                 "eval_batches", "corpus_label", "probes", "probe_sentences", "attention_probe",
                 "attention_probs_dropout_prob", "objective", "attention", *SIZE_FIELDS}


def other_differences(spec_a, spec_b) -> list[str]:
    """Labels ('seed 0 → 1') of the settings outside the knobs that differ between two runs and change what
    the run learns (not how often it is evaluated or where it runs)."""
    knob_fields = {*(s.name for s in TRAIN_SETTINGS if s.knob), "corpus", "preset"}
    pairs = {}
    for name in {*spec_a.train, *spec_b.train}:
        default = TRAIN_DEFAULTS.get(name)
        pairs[name] = (spec_a.train.get(name, default), spec_b.train.get(name, default))
    for name in {*spec_a.model_overrides, *spec_b.model_overrides}:
        default = _MODEL_DEFAULTS.get(name)
        pairs[name] = (spec_a.model_overrides.get(name, default), spec_b.model_overrides.get(name, default))
    for field in ("vocab_size", "heldout_fraction", "init_from"):
        pairs[field] = (getattr(spec_a, field), getattr(spec_b, field))
    out = []
    for name, (a, b) in sorted(pairs.items()):
        if a != b and name not in knob_fields and name not in _NOT_SETTINGS:
            out.append(f"{_OTHER_LABELS.get(name, name.replace('_', ' '))} {a if a is not None else '–'} → "
                       f"{b if b is not None else '–'}")
    return out


def one_change(spec, knob: str, value):
    """A copy of `spec` with one knob set to `value` (checked), differing from it in exactly that knob (and what it
    IMPLIES): what the 'try one change' control starts."""
    k = _knob(knob)
    if knob in MLM_ONLY and spec.train.get("objective", "mlm") != "mlm":
        raise BertCoreError(f"the {k.label} belongs to BERT's masked-LM objective; this run is causal (GPT): "
                            "change its attention back to bidirectional first")
    new_value = k.parse(value)
    if new_value == k.get(spec):
        raise BertCoreError(f"the {k.label} is already {k.show(new_value)}: choose another value to compare")
    new = k.put(spec, new_value)
    validate_spec(new)   # a bad value is a message
    changed = [c.knob for c in knob_diff(spec, new)]
    if knob not in changed or not set(changed) <= {knob} | IMPLIED.get(knob, set()):
        # a knob's writer touched another knob: a bug here, not the user's mistake
        raise AssertionError(f"changing {knob} changed {changed}")
    return new


def suggested_changes(spec) -> list[KnobChange]:
    """The one-knob changes worth trying from `spec`, for a 'try one change' menu."""
    out = []
    for name, k in KNOBS.items():
        current = k.get(spec)
        if name in MLM_ONLY and spec.train.get("objective", "mlm") != "mlm":
            continue
        for value in k.suggestions(current):
            if value != current:
                out.append(KnobChange(name, current, value, k.describe(current, value)))
    return out


def _changes(before, after) -> str:
    """What differs from run `before` to run `after`: its knobs, then the other settings."""
    return ", ".join([c.label for c in knob_diff(before, after)] + other_differences(before, after)) or "same settings"


def run_list_rows(runs, names) -> list[dict]:
    """A tab's run list as table rows: each run's name, state, step, last held-out accuracy, and what differs from
    the run before it. `runs`: .spec, .phase, .trainer (None while it waits in the queue)."""
    # A BERT's and a GPT's figures are different tasks (a GPT's next token is easier to guess than a masked one):
    # one column each, named, so that a GPT's figure never reads as a better BERT's (issue #64).
    tasks = [ACCURACY_COLUMNS[is_causal(run.spec)] for run in runs]
    rows = []
    for i, run in enumerate(runs):
        trainer = run.trainer
        evals = trainer.evals if trainer is not None else ()
        acc = evals[-1].mlm_acc if evals else None
        row = {"run": names[i], "state": run.phase, "step": trainer.step if trainer is not None else 0}
        for column in ACCURACY_COLUMNS.values():
            if column in tasks:
                row[column] = f"{acc:.1%}" if acc is not None and tasks[i] == column else "–"
        row["change from the run before"] = _changes(runs[i - 1].spec, run.spec) if i else "first run"
        rows.append(row)
    return rows


# The run list's held-out accuracy columns, by whether the run is causal (a GPT) or not.
ACCURACY_COLUMNS = {False: "held-out masked-token accuracy (BERT)", True: "held-out next-token accuracy (GPT)"}


def is_causal(spec) -> bool:
    """Whether a run's spec trains a GPT (next-token objective, causal attention) rather than a BERT."""
    return spec.train.get("objective") == "clm" or spec.model_overrides.get("attention") == "causal"


def overlay_default(run_ids, current) -> list:
    """The runs a tab's overlay starts with: its current run and the one it was changed from (so that the legend
    names the change just made); the last two when the current run has no curves yet."""
    ids = list(run_ids)
    if current in ids:
        i = ids.index(current)
        return ids[max(0, i - 1):i + 1]
    return ids[-2:]


def run_labels(specs, names=None) -> list[str]:
    """Legend names for runs overlaid on one chart: each run by what differs from the first (the reference), after
    its own name in `names`."""
    if not specs:
        return []
    ref = specs[0]
    changed_anywhere = {c.knob for s in specs[1:] for c in knob_diff(ref, s)}
    labels = []
    for i, spec in enumerate(specs):
        if i == 0:
            own = ", ".join(f"{KNOBS[n].label} {KNOBS[n].show(KNOBS[n].get(ref))}" for n in KNOBS
                            if n in changed_anywhere)
            text = f"reference ({own})" if own else "reference"
        else:
            text = _changes(ref, spec)
        name = names[i] if names and i < len(names) and names[i] else None
        labels.append(f"{name}: {text}" if name else text)
    return labels


# -- the equivalent command line --------------------------------------------------------------------------------
# The `train` option that sets each TrainConfig field, in the command's order: None when the command leaves it out,
# False when `train` has no option for it (so a new setting on the Train page cannot silently drop out of the command).
def _command_flag(name: str):
    described = SETTINGS.get(name)
    if described is not None and described.command == NEVER:
        return None
    return (described.option if described is not None else None) or False


def _command_place(name: str) -> int:
    return SETTINGS[name].command_at if name in SETTINGS else 10**7


TRAIN_FLAGS = {name: _command_flag(name) for name in sorted((f.name for f in dataclasses.fields(TrainConfig)),
                                                               key=_command_place)}
SIZE_FLAGS = {name: flag(name) for name in SIZE_FIELDS}
# Always written out, whatever the CLI's defaults (its default recipe differs from the Train page's).
ALWAYS = tuple(s.name for s in TRAIN_SETTINGS if s.command == ALWAYS_WRITTEN)


def _fmt(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _out_name(spec) -> str:
    seed = spec.train.get("seed", 0)
    raw = f"runs/{spec.preset}-{spec.corpus_label}-seed{seed}"
    return re.sub(r"[^A-Za-z0-9_./-]+", "-", raw)


def corpus_argument(spec) -> str:
    """What the command's --corpus says: a built-in corpus or a path as it is; an uploaded or pasted text as the
    file name to save it under."""
    if spec.corpus == spec.corpus_label or not spec.corpus_label:
        return spec.corpus
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", spec.corpus_label).strip("-.") or "text"
    return name if re.search(r"\.(txt|md|text)$", name) else f"{name}.txt"


def with_changes(spec, config: TrainConfig):
    """A page run's spec with the settings its run changed while it trained (`config.changes`): the spec whose
    command repeats the run as it went."""
    if not config.changes:
        return spec
    return dataclasses.replace(spec, train={**spec.train, "changes": config.changes})


def train_command(spec, out: str | None = None, corpus: str | None = None) -> str:
    """The shell-quoted `python -m bert_core train ...` command that trains what `spec` trains, to the same held-out
    figures. `corpus` replaces `corpus_argument(spec)`; `out`: default runs/PRESET-CORPUS-seedN."""
    config = spec.train_config()
    # The command leaves out what the CLI's recipe for this size sets the same (bert_core.training.recipes).
    recipe = default_recipe(spec.preset, hidden_size=spec.model_overrides.get("hidden_size"),
                            num_hidden_layers=spec.model_overrides.get("num_hidden_layers"))["train_config"]
    args = ["python", "-m", "bert_core", "train", "--corpus", corpus or corpus_argument(spec)]
    if spec.init_from:
        args += ["--init-from", str(spec.init_from)]
    else:
        args += ["--vocab-size", str(spec.vocab_size), "--preset", spec.preset]
        overrides = dict(spec.model_overrides)
        for field, option in SIZE_FLAGS.items():
            if field in overrides:
                args += [option, str(overrides.pop(field))]
        # Always written: the command line's default differs from BertConfig's (the Train page's).
        args += ["--initializer-range", _fmt(overrides.pop("initializer_range", BertConfig.initializer_range))]
        positions = overrides.pop("max_position_embeddings", None)
        if positions is not None and positions != max(512, config.max_seq_length):
            raise BertCoreError("the command line sets max_position_embeddings to max(512, --seq-len) only")
        if overrides.pop("attention", "bidirectional") == "causal" and config.objective != "clm":
            raise BertCoreError("the command line makes causal attention with --objective clm only")
        overrides = {k: v for k, v in overrides.items() if k not in ("hidden_dropout_prob",
                                                                     "attention_probs_dropout_prob")}
        if overrides:
            raise BertCoreError(f"no `train` option for {', '.join(overrides)}")
    hidden = spec.model_overrides.get("hidden_dropout_prob", BertConfig.hidden_dropout_prob)
    attn = spec.model_overrides.get("attention_probs_dropout_prob", BertConfig.attention_probs_dropout_prob)
    if hidden != attn:
        raise BertCoreError("the command line has one --dropout for hidden and attention dropout; set them equal")
    args += ["--dropout", _fmt(hidden)]
    if config.max_steps is not None and config.time_budget_s is not None:
        raise BertCoreError("the command line takes --steps or --time-budget, not both")
    cli_schedule = "linear" if config.max_steps is not None else "time"
    inert = set() if config.short_seq_length else {"short_seq_fraction", "short_seq_batch_size"}
    if not config.grow_fraction:
        inert |= {"grow_from_hidden", "grow_from_layers"}
    for field, option in TRAIN_FLAGS.items():
        if field in inert:  # the short phase's and the growth's settings, when they are off
            continue
        value = getattr(config, field)
        if option is None or value is None or (field == "schedule" and value == cli_schedule):
            continue
        if field not in ALWAYS and value == getattr(recipe, field) and field != "schedule":
            continue
        if option is False:
            raise BertCoreError(f"no `train` option for {field}; leave it at {getattr(recipe, field)}")
        if isinstance(value, bool):
            args.append(option if value else "--no-" + option[2:])
        elif field == "changes":   # the settings changed while it trained, each a --change of its own
            for change in value:
                args += [option, change_text(change)]
        else:
            args += [option, _fmt(value)]
    if spec.heldout_fraction != HELDOUT_FRACTION:
        args += ["--heldout-fraction", _fmt(spec.heldout_fraction)]
    args += ["--out", out or _out_name(spec)]
    return shlex.join(args)
