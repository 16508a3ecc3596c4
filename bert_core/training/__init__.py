"""The training wing: one observable run loop and what runs in it. The pretraining Trainer, recipes per size,
evaluation and masked-prediction statistics, held-out scoring, fine-tuning and the bag-of-words baseline, and run
comparisons. It reports only through events; it never prints to a page.

May import: bert_core.data, bert_core.model, errors, paths.
"""
