"""`python -m bert_core ...` (see bert_core.cli.main)."""

import sys

from bert_core.cli.main import main

sys.exit(main())
