"""``python -m simulator``: serve a simulated OpenAI-compatible backend."""

from __future__ import annotations

import argparse

from simulator.server import add_arguments, run, settings_from_args


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m simulator", description="OpenAI-compatible LLM backend double with GPU-like timing."
    )
    add_arguments(parser)
    run(settings_from_args(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
