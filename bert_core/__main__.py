"""`python -m bert_core ...` (see bert_core.cli)."""

import sys

from bert_core.cli import main

sys.exit(main())
