"""The serving wing: the server hosting runs, without Streamlit. Which job trains a run (job_factory; a plug-in kind
such as bert_core.cluster's is imported by name only when chosen), runs that outlive a tab, the fair queue and its
turns, child training processes, a restart's records, public-mode storage and its janitor, and where models come
from. The pages' side of it (Streamlit, run words, lesson classes, export) is bert_core.app, above it.

May import: every wing below it (model, data, training, inspect); never app, cluster or the CLI.
"""
