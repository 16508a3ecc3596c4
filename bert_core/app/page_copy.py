"""The pages' longer fixed sentences as data (page_copy.json beside this module), one section a page or module."""

import json
from pathlib import Path

WORDS: dict[str, dict] = json.loads(Path(__file__).with_name("page_copy.json").read_text(encoding="utf-8"))
