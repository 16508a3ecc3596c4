"""One description per run setting (bert_core.training.setting): the `train` options, the Train page's widget map, the
command that repeats a page run, what --resume does and the comparison knobs are all made from the descriptions on
the config's fields and the run's own settings, so that describing a setting is what makes its flag and widget."""

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from bert_core.cli import train_options, train_plan
from bert_core.data.objectives import MASK_RATE
from bert_core.errors import BertCoreError
from bert_core.model.tokenization import special_tokens_count
from bert_core.training import comparison, run_settings, train_spec
from bert_core.training.lesson_settings import lesson_settings
from bert_core.training.recipes import Recipe, recipe_for
from bert_core.training.setting import (CHANGES, NEW_RUN_ONLY, STAYS, KnobFace, Limits, Setting, Widget, described,
                                        settings_of)
from bert_core.training.train_config import TRAIN_SETTINGS, TrainConfig

ROOT = Path(__file__).resolve().parent.parent


def _train_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train")
    train_options.add_train_options(parser)
    return parser


def _options(parser) -> dict[str, argparse.Action]:
    return {a.option_strings[0]: a for a in parser._actions if a.option_strings[0] != "-h"}


def test_every_described_setting_is_an_option_and_every_option_a_described_setting():
    actions = _options(_train_parser())
    described = {s.option: s.name for s in run_settings.SETTINGS.values() if s.option}
    assert {flag: a.dest for flag, a in actions.items()} == described
    # listed in the order of the descriptions' places, which are all different
    assert list(actions) == [s.option for s in run_settings.options()]
    assert len({s.cli_at for s in run_settings.options()}) == len(actions)
    # every TrainConfig field with an option reaches the config under its own name; the rest have no option
    config_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert {a.dest for a in actions.values()} & config_fields == {s.name for s in TRAIN_SETTINGS if s.option}
    assert not {s.name for s in TRAIN_SETTINGS if s.option} & {"adam_eps", "adam_beta1", "probe_every"}


def test_a_settings_limits_are_its_options_limits():
    actions = _options(_train_parser())
    seq = actions["--seq-len"]
    assert seq.type("16") == 16
    for bad in ("15", str(run_settings.SETTINGS["max_seq_length"].limits.high + 1), "x"):
        try:
            seq.type(bad)
        except argparse.ArgumentTypeError:
            continue
        raise AssertionError(f"--seq-len took {bad}")
    assert actions["--mask-rate"].type("0.5") == 0.5
    for bad in ("0", "1", "nan"):
        try:
            actions["--mask-rate"].type(bad)
        except argparse.ArgumentTypeError:
            continue
        raise AssertionError(f"--mask-rate took {bad}")


def test_describing_a_field_is_what_makes_its_flag_widget_and_resume_rule(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Config:
        plain: int = 1
        label_smoothing: float = described(0.0, help="smooth the MLM targets (default {label_smoothing:g})",
                                           kind=float, limits=Limits(0, 1, high_open=True), cli_at=24.5,
                                           widget=Widget("train_smooth", "Label smoothing", range=(0.0, 0.5)),
                                           on_resume=CHANGES)

    new = settings_of(Config)
    assert [s.name for s in new] == ["label_smoothing"] and new[0].option == "--label-smoothing"
    monkeypatch.setattr(run_settings, "SETTINGS", {**run_settings.SETTINGS, **{s.name: s for s in new}})
    monkeypatch.setattr(run_settings, "_SETTING_OF", {**run_settings._SETTING_OF, "--label-smoothing": "label_smoothing"})
    real = train_options.train_defaults()
    monkeypatch.setattr(train_options, "train_defaults", lambda: {**real, "label_smoothing": 0.0})
    actions = _options(_train_parser())
    flags = list(actions)
    assert actions["--label-smoothing"].dest == "label_smoothing"
    assert flags.index("--label-smoothing") == flags.index("--mask-rate") + 1   # its place, cli_at 24.5
    assert "smooth the MLM targets (default 0)" in _train_parser().format_help()
    assert "label_smoothing" in [s.name for s in run_settings.page_settings()]
    assert "label_smoothing" in run_settings.on_resume(CHANGES)


def test_a_config_setting_given_a_widget_starts_from_the_recipe_or_the_configs_default(monkeypatch):
    # docs/settings.md's example, as it is written there
    warmup = dataclasses.replace(run_settings.SETTINGS["warmup_ratio"], widget=Widget(
        "train_warmup", "Warmup (share of the run)", range=(0.0, 0.5), step=0.05, group="training"))
    assert "warmup_ratio" not in lesson_settings("toy")
    monkeypatch.setattr(run_settings, "SETTINGS", {**run_settings.SETTINGS, "warmup_ratio": warmup})
    # its place on the page and in the address bar is its field's: after the learning rate
    keys = [s.widget.key for s in run_settings.page_settings()]
    assert keys.index("train_warmup") == keys.index("train_lr") + 1
    from bert_core.app.app_widgets import setting_cast
    from bert_core.app.url_settings import url_value
    assert url_value("0.9", setting_cast(warmup)) == 0.5   # a link's value is held to the page's range
    assert lesson_settings("toy")["warmup_ratio"] == TrainConfig.warmup_ratio          # the toy lesson has none
    assert lesson_settings("wikitext-2", "mini")["warmup_ratio"] == recipe_for("mini").warmup_ratio


def test_the_tables_are_made_from_the_descriptions():
    settings = run_settings.SETTINGS
    assert train_spec.WIDGETS == {s.widget.key: s.name for s in (*run_settings.RUN_SETTINGS, *TRAIN_SETTINGS)
                                  if s.widget}
    assert set(train_spec.PAGE_TRAIN_FIELDS) == {s.name for s in TRAIN_SETTINGS if s.widget}
    assert train_spec.APP_TRAIN == {"eval_batches": 20, "device": "cpu"}
    assert set(train_plan.RESUMABLE) == {s.name for s in settings.values() if s.on_resume == CHANGES}
    assert set(train_options.RECIPE_SETTINGS) == {f.name for f in dataclasses.fields(Recipe)} - {"preset", "device"}
    # every comparison knob that is one config field is a described knob, with its label
    train_knobs = {name: k for name, k in comparison.KNOBS.items() if name in run_settings.TRAIN_FIELDS}
    assert {name: k.label for name, k in train_knobs.items()} == {s.name: s.label for s in TRAIN_SETTINGS if s.knob}
    assert all(isinstance(settings[name].knob, KnobFace) for name in train_knobs)
    # the command writes every config field with an option but those that do not change what a run learns
    assert {f for f, option in comparison.TRAIN_FLAGS.items() if option} == \
        {s.name for s in TRAIN_SETTINGS if s.option} - {"checkpoint_every_s", "precision", "compile"}
    assert set(comparison.TRAIN_FLAGS) == {f.name for f in dataclasses.fields(TrainConfig)}


def test_resume_checks_every_setting_that_stays_or_starts_a_new_run_only():
    stays = set(run_settings.on_resume(STAYS))
    assert {"corpus", "max_seq_length", "mask_rate", "seed", "dropout", "grow_fraction"} <= stays
    assert set(run_settings.on_resume(NEW_RUN_ONLY)) == {"vocab_size", "tokenizer", "init_from", "copy_positions",
                                                         *run_settings.SIZE_FIELDS}
    config = TrainConfig()
    state = {"metadata": {"corpora": ["toy"], "heldout": {"fraction": 0.1}, "preset": "nano"}}
    model = type("ModelConfig", (), {"hidden_dropout_prob": 0.0, "initializer_range": 0.02})()
    assert set(train_plan._saved_settings(state, config, model)) == stays
    # every option says what a resume does with it, but the command's own (where to write, how to print)
    unsaid = {s.name for s in run_settings.options() if s.on_resume is None}
    assert unsaid == {"out", "overwrite", "resume", "json"}


def test_no_module_lists_the_settings_again():
    """The tables the descriptions replaced are gone, and no module spells out a tuple of setting names."""
    names = set(run_settings.SETTINGS)
    tuple_of_names = re.compile(r"^[A-Z_]+\s*=\s*\([^)]*\)", re.MULTILINE)   # a module constant: a tuple
    offenders = []
    for path in [*(ROOT / "bert_core").rglob("*.py"), *(ROOT / "pages").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        for gone in ("SHORT_FLAGS", "COMMAND_FIELDS", "PAGE_TRAIN_FIELDS = (", "RESUMABLE = (", "RECIPE_SETTINGS = ("):
            assert gone not in text, (path, gone)
        for match in tuple_of_names.finditer(text):
            listed = set(re.findall(r"\"(\w+)\"", match.group(0)))
            if len(listed & names) >= 4:
                offenders.append((path.relative_to(ROOT), sorted(listed & names)))
    assert not offenders, offenders


def test_one_mask_rate_and_the_tokenizers_special_token_budget():
    assert TrainConfig().mask_rate == MASK_RATE == Recipe("nano", "cpu", 0.1, 1e-3, 16, 128, 32, 0, 0.5).mask_rate
    assert special_tokens_count(pair=True) == 3 and special_tokens_count(pair=False) == 2
    literal = re.compile(r"(?<![\w.])0\.15(?![\d])")
    budget = re.compile(r"3 if \w+.* else 2")
    for path in (ROOT / "bert_core").rglob("*.py"):
        if path.name.startswith("corpus_"):   # the shard stream: its owner's to change
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            code = line.split("#")[0]
            if ("mask_rate" in code or "MASK_RATE" in code) and "MASK_RATE = " not in code:
                assert not literal.search(code) or "→" in code, (path, line)
            if path.name != "tokenization.py":
                assert not budget.search(code), (path, line)


def test_the_config_refuses_what_each_description_refuses():
    """The config's check is its descriptions' limits and choices (once), not a list of its own."""
    for s in TRAIN_SETTINGS:
        if s.limits is not None:
            low = s.limits.low - (0 if s.limits.low_open else (1 if s.kind is int else 1e-9))
            with pytest.raises(BertCoreError, match=s.name):
                TrainConfig(**{s.name: s.kind(low)})
        if s.choices is not None:
            with pytest.raises(BertCoreError, match=f"{s.name} must be one of"):
                TrainConfig(**{s.name: "none-such"})
    with pytest.raises(BertCoreError, match="batch_size must be a whole number"):
        TrainConfig(batch_size="32")   # a hand-edited trainer_state.json
