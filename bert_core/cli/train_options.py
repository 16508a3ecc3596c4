"""The options of `python -m bert_core train`, as users type them, made from the run settings' descriptions
(bert_core.training.run_settings; docs/settings.md): each option is a described setting's flag, stores its value under
the setting's name (`--lr` is `learning_rate`), and is listed where its description places it. So the options become
a TrainConfig, a model's sizes and a recipe's values without a map between names. The defaults shown are those of
the default size's recipe (bert_core.cli.train_recipe); every option is None unless given, so that the recipe and
--resume know what was."""

from __future__ import annotations

import argparse

from bert_core.cli.arguments import limits_arg, path_arg
from bert_core.cli.train_recipe import train_defaults
from bert_core.errors import BertCoreError
from bert_core.training.run_settings import options
from bert_core.training.setting import Setting


def _option(p, described: Setting, **kwargs) -> None:
    """Add an option that stores its value under the setting it sets; --help names its value as the flag does."""
    if "choices" not in kwargs and "action" not in kwargs:
        kwargs.setdefault("metavar", described.option.removeprefix("--").replace("-", "_").upper())
    p.add_argument(described.option, dest=described.name, **kwargs)


def _checked(parse):
    """An argparse type from a setting's own parser (`kind` a function): its BertCoreError as argparse's error."""
    def parse_arg(text: str):
        try:
            return parse(text)
        except BertCoreError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse_arg


def _words(defaults: dict) -> dict:
    return {name: ("on" if value else "off") if isinstance(value, bool) else value for name, value in defaults.items()}


def _argparse_kwargs(described: Setting, defaults: dict) -> dict:
    """The add_argument keywords of a described setting: its action or type, choices, metavar and help."""
    kwargs = {"help": described.help.format(**_words(defaults))}
    if described.kind is bool:
        kwargs.update(action=argparse.BooleanOptionalAction, default=None)
    elif described.kind == "switch":
        kwargs["action"] = "store_true"
    elif described.kind in ("list", "paths"):
        kwargs.update(action="append", required=False, **({"type": path_arg} if described.kind == "paths" else {}))
    elif described.kind == "path":
        kwargs["type"] = path_arg
    elif described.limits is not None:
        kwargs["type"] = limits_arg(described.kind, described.limits)
    elif callable(described.kind) and described.kind not in (int, float, str):
        kwargs["type"] = _checked(described.kind)
    if described.repeat:
        kwargs["action"] = "append"
    if described.choices is not None:
        kwargs["choices"] = list(described.choices)
    if described.metavar is not None:
        kwargs["metavar"] = described.metavar
    return kwargs


def add_train_options(p: argparse.ArgumentParser) -> None:
    """Add every option of `train` to its parser, in the order --help lists them (their descriptions' `cli_at`)."""
    add_options(p, options(), train_defaults())


def add_options(p: argparse.ArgumentParser, described_settings, defaults: dict) -> None:
    """Add an option for each described setting, in the order given; options that exclude each other (`one_of`:
    --steps and --time-budget) share a group. `defaults` fills in the "{name}" of a help."""
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for described in described_settings:
        where = p
        if described.one_of is not None:
            if described.one_of not in groups:
                groups[described.one_of] = p.add_mutually_exclusive_group()
            where = groups[described.one_of]
        _option(where, described, **_argparse_kwargs(described, defaults))
