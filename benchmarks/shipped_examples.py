"""Choose the plain-English examples each shipped checkpoint's pages open on, and store them
(bert_core/inspect/shipped_examples.json), so that a page opens a shipped model without asking it first.

    PYTHONPATH=. python benchmarks/shipped_examples.py [--check]

Asks every checkpoint in checkpoints/ (bert_core.inspect.example_choice.choose_examples: a few forward passes each,
seconds in all) and writes its choice under its folder's name with the sha256 of its weights; a page uses a stored
choice only for those very weights. Run it again after a shipped checkpoint changes (tests/test_plain_examples.py
fails until then). --check writes nothing and exits 1 when the stored file differs from a fresh choice.
"""
import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bert_core.inspect import plain_examples  # noqa: E402
from bert_core.inspect.example_choice import choose_examples  # noqa: E402
from bert_core.serve.model_sources import load_folder, shipped_checkpoints  # noqa: E402


def fresh_choices() -> dict:
    """{folder name: {"weights_sha256", "examples"}} for every shipped checkpoint, asked now."""
    entries = {}
    for name, folder in shipped_checkpoints().items():
        model, tokenizer, _ = load_folder(folder)
        examples = choose_examples(model, tokenizer)
        entries[name] = {"weights_sha256": plain_examples.weights_digest(folder), "examples": dataclasses.asdict(examples)}
        print(f"{name}: {examples.sentences[0]!r} ({examples.right.guesses}); misses {examples.wrong.text!r} "
              f"({examples.wrong.guesses})" if examples.wrong else f"{name}: {examples.sentences[0]!r}")
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the stored file; write nothing")
    args = parser.parse_args()
    entries = fresh_choices()
    if args.check:
        same = json.loads(json.dumps(entries)) == plain_examples.read_stored()   # tuples read back as lists
        print("the stored choices agree with the models" if same else "the stored choices are out of date")
        sys.exit(0 if same else 1)
    plain_examples.SHIPPED_EXAMPLES.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
    print(f"wrote {plain_examples.SHIPPED_EXAMPLES}")


if __name__ == "__main__":
    main()
