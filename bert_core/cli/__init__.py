"""The command-line wing: `python -m bert_core COMMAND`, one module per command family (main holds the parser),
and the argparse types they share. Nothing imports it but bert_core.__main__.

May import: every wing but serve.
"""
