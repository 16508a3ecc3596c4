"""The model wing: what a checkpoint holds. The config and its presets, the BERT itself (one file, Hugging Face's
module names and state_dict keys), its CPU fast paths, the WordPiece tokenizer, reading and writing Hugging Face
folders, and checkpoint folders with their trainer state.

May import: bert_core.errors, bert_core.paths. Imported by every wing above it.
"""
