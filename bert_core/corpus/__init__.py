"""The corpus pipeline (`python -m bert_core corpus build`): public collections read, cleaned, deduplicated,
decontaminated against the project's evaluation text and tokenized into uint16 shards (docs/corpus.md). Optional:
no module of the core imports it; a run reads the shards it writes through bert_core.data.shards."""
