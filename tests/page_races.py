"""A race built as the Fine-tune page built its runs before it described them in a FinetuneSpec
(bert_core.training.finetune_race.build_race builds the page's and the CLI's now): the tests' quick way to a
FinetuneComparison over data already loaded and a model already in memory."""

from __future__ import annotations

from bert_core.training.finetune import FinetuneComparison, split_task
from bert_core.training.finetune_settings import FinetuneConfig, page_settings


def build_comparison(data, model, tokenizer, settings: dict, others=(), baseline: bool = False,
                     device: str = "cpu") -> FinetuneComparison:
    """Split `data` (split_task), give a copy of `model`'s encoder the kind's head ("pretrained") and make its
    from-scratch twin ("scratch"); `others` ((name, model, tokenizer)) race from their own weights with the same data,
    budget and seed, and `baseline` adds the kind's baseline lines. `settings`: train, val (sizes), seed, steps or
    budget (s), lr, batch, maxlen, as the page's widgets name them without their `ft_`."""
    seed = settings["seed"]
    task = split_task(data, settings["train"], settings["val"], seed)
    config = FinetuneConfig(**page_settings({f"ft_{k}": v for k, v in settings.items()}), device=device)
    pre = task.head_from_model(model, seed)
    runs = [("pretrained", pre, tokenizer)]
    runs += [(name, task.head_from_model(m, seed), tok) for name, m, tok in others]
    runs.append(("scratch", task.new_head(pre.config, seed), tokenizer))
    return FinetuneComparison(runs, config=config, baseline=baseline, task=task)
