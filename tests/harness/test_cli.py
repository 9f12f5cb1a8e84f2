"""The `harness` command line (harness/cli.py): a command line that names
its subcommand imports that module only; help lists every subcommand; a
word that is not one is one line and exit 2."""

from __future__ import annotations

import pytest

from harness.cli import COMMANDS, main, named_command
from tests.support import fresh_python


@pytest.mark.parametrize("argv, command", [
    (["check", "h.jsonl"], "check"),
    (["-v", "check", "h.jsonl"], "check"),
    (["run", "--nemesis", "partition"], "run"),
    (["--version"], None),
    (["chek", "h.jsonl"], None),
    ([], None),
])
def test_the_named_subcommand_is_the_first_word_that_is_not_a_flag(argv, command):
    assert named_command(argv) == command


def test_a_check_imports_no_other_subcommand_and_no_pandas():
    """`harness check` from the shell pays for its own imports only (the
    others, pandas among them, cost more: docs/decisions.md, "A cold check's
    start")."""
    others = [module for name, (module, _) in COMMANDS.items() if name != "check"]
    code = ("import sys\nfrom harness.cli import main\n"
            "status = main(['check', '/nonexistent/history.jsonl'])\n"
            f"print(status, [m for m in {others + ['pandas']!r} if m in sys.modules])\n")
    proc = fresh_python(code, timeout=120)
    assert proc.stdout.split("\n")[0] == "2 []", proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "no such file" in proc.stderr, proc.stderr


def test_help_lists_every_subcommand_and_a_subcommand_its_flags(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert "--spark-master" in capsys.readouterr().out


def test_a_word_that_is_no_subcommand_is_one_line_and_exit_2(capsys):
    assert main(["chek", "history.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'chek'" in err
