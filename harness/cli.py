"""The `harness` command line: one subcommand per stage of the flow.

Each subcommand lives in its own module, which exposes
`configure(parser)` (adds its flags) and `run(args) -> int` (exit status).
A command line that names its subcommand imports that module only (every
module's imports cost more than `harness check`'s own, paid by each check
from the shell: docs/decisions.md, "A cold check's start"); `harness
--help` and a name that is not a subcommand import them all. Modules keep
heavy imports (pyspark, confluent_kafka, paramiko) inside their functions.

Errors the user can fix end with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from harness import __version__
from core.errors import UserError, first_line

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("harness.run.runner", "a chaos run: cluster, clients under faults, heal, read back, check, report"),
    "check": ("harness.check", "check a history for lost writes, duplicates and offset anomalies"),
    "report": ("harness.report", "render a run's report.html from its history and results"),
    "gen-history": ("lab.synthetic", "write a synthetic history with planted anomalies"),
    "bench": ("bench.targets", "run a benchmark and print its measurements"),
    "cluster": ("harness.cluster", "bring a cluster up, show it, take it down (local namespaces, docker containers, ssh hosts, vagrant VMs)"),
    "scenarios": ("harness.scenarios", "list the named scenarios (scenarios/*.toml) and what each should show"),
    "calibrate": ("harness.campaign.calibrate", "run scenarios several times each and tally how often the verdict is right"),
    "nightly": ("harness.campaign.nightly", "run a matrix of scenarios one after another; summary.json, JUnit XML, nightly and trend pages"),
    "replay": ("harness.campaign.replay", "run a run again N times with its exact spec and fault schedule; the reproduction rate of each anomaly"),
    "shrink": ("harness.campaign.shrink", "search a failing run for a smaller fault schedule that still fails; write it as a scenario"),
    "compare": ("harness.compare", "runs side by side, the differences first: the same scenario on several systems, versions or seeds"),
    "serve": ("harness.serve", "a read-only web server on 127.0.0.1 over the results: index with filters, reports, runs side by side"),
    "clean": ("harness.clean", "remove everything harness runs left on this machine (namespaces, rules, daemons, mounts, keys)"),
}


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse's name
        raise UserError(f"{self.prog}: {message}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, a subcommand's name, only that
    one's module is imported and its flags added (the others are listed)."""
    parser = OneLineParser(prog="harness", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name, (module_name, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text, description=help_text)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip().splitlines()[0])
        module.configure(p)
        p.set_defaults(_module=module)
    return parser


def named_command(argv: list[str]) -> str | None:
    """The subcommand a command line names (its first word that is not a
    flag: the top level's flags take no values), if it is one."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(only=named_command(argv))
        args = parser.parse_args(argv)
        if args.verbose:
            logging.getLogger().setLevel(logging.DEBUG)
        if not getattr(args, "command", None):
            parser.print_help()
            return 2
        return int(args._module.run(args) or 0)
    except UserError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug in the harness, not the user's input
        if os.environ.get("HARNESS_DEBUG"):
            raise
        print(f"harness: internal error: {type(e).__name__}: {first_line(e)} (HARNESS_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
