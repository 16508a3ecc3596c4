"""The options of `python -m bert_core train`, as users type them, and the recipe that fills in those not given.

Each option is made from a run setting's description (bert_core.training.run_settings; docs/settings.md): it is the
setting's flag, stores its value under the setting's name (`--lr` is `learning_rate`), and is listed where its
description places it. So the options become a TrainConfig, a model's sizes and a recipe's values without a map
between names. Every option is None unless given, so that the recipe and --resume know what was. On a new run, an
option not given takes the recipe for the model's size on this kind of machine (bert_core.training.recipes) or its
fixed default, and the log says in one line what the recipe set; --help shows the default size's recipe.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from bert_core.cli.arguments import limits_arg, path_arg
from bert_core.data.corpora import HELDOUT_FRACTION
from bert_core.data.objectives import objective_has_nsp
from bert_core.errors import BertCoreError
from bert_core.model.config import PRESETS, BertConfig
from bert_core.training.recipes import GROW_FROM, Recipe, preset_for_size, short_phase_rows
from bert_core.training.run_settings import flag, options
from bert_core.training.setting import LENGTHENS, Setting
from bert_core.training.train_config import TRAIN_SETTINGS, default_recipe

# The `train` options whose default is the size's recipe: the recipe's own fields (bert_core.training.recipes.Recipe)
# but the size and machine it is for.
RECIPE_SETTINGS = tuple(f.name for f in dataclasses.fields(Recipe) if f.name not in ("preset", "device"))
# The defaults of `train` that are not the config's: the schedule follows --steps or --time-budget, the run keeps a
# checkpoint every ten minutes, the vocabulary trained and the held-out share are the run's own.
_OWN_DEFAULTS = {"schedule": None, "checkpoint_every_s": 600.0, "vocab_size": 8000,
                 "heldout_fraction": HELDOUT_FRACTION}


def train_defaults(preset: str | None = None, device: str = "cpu", hidden_size: int | None = None,
                   num_hidden_layers: int | None = None) -> dict:
    """Each `train` option's value when a new run does not give it, by setting name: the recipe for the size on
    this kind of machine, and the fixed defaults of the rest."""
    recipe = default_recipe(preset, device, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers)
    config = recipe["train_config"]
    fixed = {s.name: getattr(config, s.name) for s in TRAIN_SETTINGS if s.option and s.on_resume != LENGTHENS}
    return {"preset": recipe["preset"], **fixed, **_OWN_DEFAULTS,
            **{name: getattr(recipe["recipe"], name) for name in RECIPE_SETTINGS}}


def recipe_device(name: str | None) -> str:
    """The kind of machine whose recipe a run takes: cuda when it will train on a CUDA GPU, else cpu."""
    return "cuda" if (name or "auto") in ("auto", "cuda") and torch.cuda.is_available() else "cpu"


def defaults_text(d: dict) -> str:
    """The recipe's values in `train`'s option names, as the log shows them."""
    short = ""
    if d["short_seq_length"] and d["short_seq_fraction"]:
        rows = short_phase_rows(d["batch_size"], d["max_seq_length"], d["short_seq_length"],
                                d["short_seq_batch_size"])
        short = f", the first {d['short_seq_fraction']:.0%} at {rows} x {d['short_seq_length']}"
    grow = ""
    if d["grow_fraction"]:
        grow = (f", starts as {d['grow_from_layers']} x {d['grow_from_hidden']} and grows after "
                f"{d['grow_fraction']:.0%} of the run (--grow-fraction 0: the full size from the start)")
    return (f"--lr {d['learning_rate']:g}, --initializer-range {d['initializer_range']:g}, batch {d['batch_size']} x "
            f"{d['max_seq_length']}{short}, --mask-rate {d['mask_rate']:g}, --dropout {d['dropout']:g}{grow}")


def recipe_size(args) -> tuple[str | None, int | None, int | None]:
    """(preset, hidden size, layers) whose recipe a new run takes: --init-from's model, or the size asked for."""
    if args.init_from is not None:
        try:
            config = BertConfig.load(args.init_from)
        except BertCoreError:  # not a checkpoint: load_checkpoint says why, in its own words, a moment later
            return args.preset, None, None
        return preset_for_size(config.hidden_size, config.num_hidden_layers), config.hidden_size, \
            config.num_hidden_layers
    preset = args.preset
    if preset is None and (args.hidden_size is not None or args.num_hidden_layers is not None):
        preset = preset_for_size(args.hidden_size or PRESETS["nano"]["hidden_size"],
                                 args.num_hidden_layers or PRESETS["nano"]["num_hidden_layers"])
    return preset, args.hidden_size, args.num_hidden_layers


def apply_recipe(args) -> str:
    """Fill in, in place, the options a new run did not give; returns the log's line on the recipe and the flags
    that replaced its values."""
    args.objective = args.objective or "mlm"
    if not objective_has_nsp(args.objective):  # before the defaults: NSP is on by default for BERT only
        if args.nsp:
            raise BertCoreError(f"--nsp: the {args.objective} objective has no next-sentence prediction; "
                                "leave --nsp out")
        args.nsp = False
    preset, hidden, layers = recipe_size(args)
    defaults = train_defaults(preset, recipe_device(args.device), hidden, layers)
    given = [name for name in RECIPE_SETTINGS if getattr(args, name) is not None]
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
            if name == "short_seq_length" and value >= args.max_seq_length:
                args.short_seq_length = 0  # the default short phase is no shorter than a --seq-len given
    start_size = [flag(name) for name in ("grow_from_hidden", "grow_from_layers") if name in given]
    if start_size and not args.grow_fraction:   # a start size alone would be silently ignored
        why = ("--grow-fraction 0 trains at full size from the start" if "grow_fraction" in given else
               f"the {defaults['preset']} recipe on {recipe_device(args.device)} starts at full size")
        raise BertCoreError(f"{' and '.join(start_size)} set the size a growing run starts as, and this run does not "
                            f"grow ({why}): add --grow-fraction F, or leave them out")
    if args.grow_fraction and not (args.grow_from_hidden and args.grow_from_layers):
        args.grow_from_hidden, args.grow_from_layers = args.grow_from_hidden or GROW_FROM[0], \
            args.grow_from_layers or GROW_FROM[1]   # a --grow-fraction alone grows from the recipes' start size
    line = f"recipe for {defaults['preset']} on {recipe_device(args.device)}: {defaults_text(defaults)}"
    if given:
        line += "; your " + ", ".join(flag(name) for name in given) + " replaced the recipe's"
    return line


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
