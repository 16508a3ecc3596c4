"""A page's widget for a run setting is drawn from the setting's description (bert_core.training.setting.Widget):
its label, help, the page's range (narrower than the limits on purpose, and said so on the description), step,
format and options; its URL value is read through the same range (bert_core.app.url_settings.Within)."""

import dataclasses

import pytest

from bert_core.app import app_widgets
from bert_core.app.url_settings import LinkValueError, Within, url_value
from bert_core.training import run_settings
from bert_core.training.setting import Limits, Setting, Widget, described, settings_of


class Recorder:
    """Stands in for `st` or a column: records each widget drawn (its kind, label, positional and keyword args)."""

    def __init__(self):
        self.drawn = []

    def __getattr__(self, kind):
        def draw(label, *args, **kwargs):
            self.drawn.append((kind, label, args, kwargs))
            return kwargs["key"]
        return draw


def test_a_number_widget_is_drawn_from_its_description():
    where = Recorder()
    assert app_widgets.setting_widget(run_settings.SETTINGS["initializer_range"], where) == "train_init"
    kind, label, args, kwargs = where.drawn[0]
    assert (kind, label, args) == ("number_input", "Initial weight scale (std)", (0.001, 1.0))
    assert kwargs["step"] == 0.01 and kwargs["format"] == "%.3f" and kwargs["help"].startswith("BERT's initializer")
    where = Recorder()
    app_widgets.setting_widget(run_settings.SETTINGS["mask_rate"], where, disabled=True)
    assert where.drawn[0][:3] == ("slider", "Mask rate", (0.01, 0.5)) and where.drawn[0][3]["disabled"]


def test_a_choice_and_a_switch_are_drawn_from_their_descriptions():
    where = Recorder()
    app_widgets.setting_widget(run_settings.SETTINGS["corpus"], where)
    app_widgets.setting_widget(run_settings.SETTINGS["preset"], where)
    app_widgets.setting_widget(run_settings.SETTINGS["nsp"], where)
    (k1, l1, a1, kw1), (k2, l2, a2, kw2), (k3, l3, _, kw3) = where.drawn
    assert (k1, l1, a1[0]) == ("selectbox", "Text to learn from", ["toy", "tinyshakespeare", "wikitext-2", "upload",
                                                                     "paste"])
    assert kw1["format_func"]("wikitext-2") == "WikiText-2 (Wikipedia articles)"
    assert (k2, l2, a2[0]) == ("selectbox", "Size preset", ["nano", "tiny", "mini", "small", "custom"])
    assert (k3, l3, kw3["key"]) == ("checkbox", "Next-sentence prediction", "train_nsp")


def test_a_page_range_is_within_the_settings_limits_and_the_link_is_held_to_it():
    for setting in run_settings.page_settings():
        shown = setting.page_range()
        if shown is None:
            continue
        lo, hi = shown
        lim = setting.limits
        if lim is not None:    # the page's range narrows the limits `train` takes, never widens them
            assert lim.low <= lo and (lim.low < lo or not lim.low_open), setting.name
            assert lim.high is None or hi < lim.high or (hi == lim.high and not lim.high_open), setting.name
        assert app_widgets.setting_cast(setting) == Within(lo, hi)
    layers = run_settings.SETTINGS["num_hidden_layers"]
    assert layers.limits == Limits(1, 512) and layers.page_range() == (1, 12)
    assert url_value("400", app_widgets.setting_cast(layers)) == 12
    with pytest.raises(LinkValueError):
        url_value("huge", app_widgets.setting_cast(run_settings.SETTINGS["preset"]))
    assert url_value("false", app_widgets.setting_cast(run_settings.SETTINGS["nsp"])) is False


def test_any_config_described_with_a_widget_draws_one_in_its_group_in_field_order():
    """What the fine-tune page's settings use: a config of its own, described on its fields."""
    @dataclasses.dataclass(frozen=True)
    class Config:
        batch: int = described(16, kind=int, limits=Limits(1, 4096),
                               widget=Widget("ft_batch", "Batch size", range=(1, 256), group="run"))
        lr: float = described(3e-5, kind=float, limits=Limits(0, low_open=True),
                              widget=Widget("ft_lr", "Peak learning rate", range=(1e-6, 1.0), format="%.5f",
                                            group="run"))
        train: int = described(1000, kind=int, limits=Limits(1, 10**6),
                               widget=Widget("ft_train", "Training {unit}", help="{unit} to learn from"))

    where = Recorder()
    app_widgets.setting_widgets(settings_of(Config), "run", where)
    assert [(d[1], d[2]) for d in where.drawn] == [("Batch size", (1, 256)), ("Peak learning rate", (1e-6, 1.0))]
    train = settings_of(Config)[2]
    app_widgets.setting_widget(train, where, unit="sentences")
    assert where.drawn[-1][1] == "Training sentences" and where.drawn[-1][3]["help"] == "sentences to learn from"
    assert Setting("x", kind=int, limits=Limits(0, 10)).page_range() == (0, 10)   # closed limits serve as the range
    assert Setting("x", kind=float, limits=Limits(0, 1, low_open=True)).page_range() is None
