"""The inspection wing: looking inside a model. Fill-mask and NSP predictions, attention extraction and head
labels, probes taken during training, text generation, and the Plotly figures of all of these (never Streamlit).

May import: bert_core.training, bert_core.data, bert_core.model, errors, paths.
"""
