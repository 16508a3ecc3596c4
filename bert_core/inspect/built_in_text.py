"""The text the inspection pages start from, kept as data in built_in_text.json beside this module (the grammar
check's minimal pairs, the candidate page examples, the word maps' sense sentences, the English probes and the
probes' stopwords): written for this project, edited without touching code, read once."""

import json
from pathlib import Path

TEXT: dict = json.loads(Path(__file__).with_name("built_in_text.json").read_text(encoding="utf-8"))
