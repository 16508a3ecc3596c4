"""`python -m bert_core ...` (see bert_core.cli)."""

import sys

from bert_core.allocator import reexec_with_huge_pages

reexec_with_huge_pages(sys.argv[1:])  # a training command starts again with malloc's huge pages (see allocator)

from bert_core.cli import main  # noqa: E402  (after the re-exec: importing torch first would be wasted)

sys.exit(main())
