"""Fine-tuning's settings are described once (bert_core.training.finetune_settings): the `finetune` command's options
and the Fine-tune page's settings widgets are made from the descriptions, and the page's values become the race's
settings through them, with no map of names in between."""

import argparse

from bert_core.cli.main import build_parser
from bert_core.training.finetune_settings import (
    CONFIG_SETTINGS,
    FINETUNE_SETTINGS,
    PAGE_SETTINGS,
    PAGE_WIDGETS,
    FinetuneConfig,
    page_settings,
)


def _finetune_parser() -> argparse.ArgumentParser:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices["finetune"]


def test_every_finetune_option_is_a_described_setting_stored_under_its_name_in_help_order():
    options = [a for a in _finetune_parser()._actions if a.option_strings and a.dest != "help"]
    assert [(a.option_strings[0], a.dest) for a in options] == [(s.option, s.name) for s in FINETUNE_SETTINGS]
    assert [s.cli_at for s in FINETUNE_SETTINGS] == sorted(s.cli_at for s in FINETUNE_SETTINGS)


def test_a_command_line_becomes_the_config_by_the_settings_names():
    from bert_core.cli.finetune import config_from_args

    args = build_parser().parse_args(["finetune", "--lr", "3e-4", "--batch-size", "8", "--steps", "7",
                                      "--warmup-ratio", "0.2", "--dropout", "0", "--seed", "5"])
    config = config_from_args(args)
    assert (config.learning_rate, config.batch_size, config.max_steps, config.warmup_ratio, config.dropout,
            config.seed, config.time_budget_s) == (3e-4, 8, 7, 0.2, 0.0, 5, None)
    assert {s.name for s in CONFIG_SETTINGS} <= set(vars(args))


def test_the_pages_widgets_and_their_values_come_from_the_descriptions():
    assert list(PAGE_WIDGETS) == [s.widget.key for s in PAGE_SETTINGS]
    assert set(PAGE_WIDGETS) == {"ft_train", "ft_val", "ft_seed", "ft_steps", "ft_budget", "ft_lr", "ft_batch",
                                 "ft_maxlen"}   # the keys (and URL parameters) old links fill
    values = {"ft_train": 100, "ft_val": 50, "ft_seed": 2, "ft_steps": 40, "ft_budget": 300, "ft_lr": 1e-3,
              "ft_batch": 16, "ft_maxlen": 64}
    config = FinetuneConfig(**page_settings(values))
    assert (config.seed, config.max_steps, config.time_budget_s, config.learning_rate, config.batch_size,
            config.max_length, config.eval_points) == (2, 40, 300.0, 1e-3, 16, 64, 10)


def test_every_max_length_the_description_allows_makes_a_config():
    """--max-length's limits are its own (8 up): the schedule's TrainConfig, made from the same config, does not
    hold it to pretraining's 16-token floor (it did, and `finetune --max-length 8` failed naming max_seq_length)."""
    low = next(s for s in CONFIG_SETTINGS if s.name == "max_length").limits.low
    config = FinetuneConfig(max_length=int(low))
    assert config.max_length == 8 and config.train_config().max_steps == config.max_steps
