#!/bin/sh
# kdet-search over pipes (driven by a small Python controller stand-in).
exec /usr/bin/python3 "$KD_SRC/tests/controller/searcher/test_cli.py" "$KD_BUILD/bin/kdet-search"
