"""The command-line wing: `python -m bert_core COMMAND`, one module per command family (main holds train, eval
and fill-mask), and the argparse types they share. Nothing imports it but bert_core.__main__.

May import: every wing but serve.
"""
