"""The `tokenmill sim` flags parsed as the CLI parses them, for tests that call ``cmd_sim``."""

from __future__ import annotations

import argparse

from tokenmill.sim.cli_args import add_sim_args


def sim_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    return parser.parse_args(list(argv))
