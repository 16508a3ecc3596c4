"""The data wing: text in, tensors out. Corpora and their downloads, the toy grammar, NSP instances and masking
(pure, seeded, inspectable records), batches, and the labelled data of fine-tuning tasks.

May import: bert_core.model (the tokenizer and the label conventions), errors, paths.
"""
