"""Placeholder entry points for commands whose issue has not landed yet."""

import argparse
import sys


def stub(prog: str, description: str) -> None:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.parse_args()
    print(f"{prog}: not implemented yet", file=sys.stderr)
    sys.exit(2)
