"""``python -m loadtests loadtest ...``, ``python -m loadtests compare ...`` and ``length-table``.

The same flags as ``triage loadtest`` and ``triage bench compare``; ``length-table``
writes the simulator's length table of a workload that hides lengths.
"""

from __future__ import annotations

import argparse
import sys

from loadtests.cli import (
    add_compare_arguments,
    add_length_table_arguments,
    add_loadtest_arguments,
    run_compare,
    run_length_table,
    run_loadtest,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests", description="Triage load tools")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("loadtest", help="one load test against any OpenAI-compatible URL")
    add_loadtest_arguments(p)
    p.set_defaults(func=run_loadtest)
    p = sub.add_parser("compare", help="direct vs FIFO vs short-first vs oracle on one seeded load")
    add_compare_arguments(p)
    p.set_defaults(func=run_compare)
    p = sub.add_parser("length-table", help="write the simulator's length table of a workload that hides lengths")
    add_length_table_arguments(p)
    p.set_defaults(func=run_length_table)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
