"""`--help` as a terminal shows it: the installed `rlinfra` at fixed widths, for the root and
every command. Paragraphs are flowed to the width (no line ends where the source wrapped the
docstring), every help text is there word for word, and only options that take a value show a
value placeholder.
"""

from __future__ import annotations

import inspect
import itertools
import os
import re
import subprocess
from typing import Any

import pytest
import typer

from helpers.paths import RLINFRA
from rlinfra.cli import COMMANDS, app

WIDTH = 100
# Narrower terminals too: there a line broken where the source wrapped is plainly short.
WIDTHS = [WIDTH, 80, 60]
# The docstrings are wrapped at 96 columns in the source, as wide as a paragraph flows at
# COLUMNS=100, so there a flowed paragraph may rightly break where the source did; at 80 columns
# it breaks nowhere the source did.
BAD_BREAKS_WIDTH = 80

# Where docstrings wrap in the source; help that keeps the source's line breaks (Typer's Rich
# markup mode) broke its lines there at every width.
KNOWN_BAD_BREAKS = [
    ("up", "and the last", "configuration run"),
    ("up", "node contract,", "venv, bucket"),
    ("up", "one of its jobs", "still runs"),
    ("status", "(or killed", "midway)"),
    ("status", "through an SSH", "tunnel)"),
    ("down", "processes and", "remove the node"),
    ("", "(or killed", "midway)"),
    ("", "processes and", "remove the node"),
]


NAMES = ["", *(n for n, _ in COMMANDS)]
IDS = ["rlinfra"] + [f"rlinfra {n}" for n in NAMES[1:]]


def help_of(*argv: str, width: int = WIDTH) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RLINFRA_") and k not in ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS")
    }
    env.update(COLUMNS=str(width), TERMINAL_WIDTH=str(width), RLINFRA_QUIET="1")
    return subprocess.run(
        [RLINFRA, *argv],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def group() -> Any:
    return typer.main.get_command(app)


@pytest.fixture(scope="module")
def pages() -> dict[tuple[int, str], str]:
    """Each `--help` page by terminal width and command name ("" for `rlinfra --help`)."""
    found = {}
    for width in WIDTHS:
        for name in NAMES:
            done = help_of(*([name] if name else []), "--help", width=width)
            assert done.returncode == 0, (name, done.stderr)
            assert done.stderr == "", (name, done.stderr)
            found[width, name] = done.stdout
    return found


def command_of(group: Any, name: str) -> Any:
    return group.commands[name] if name else group


def paragraphs(text: str | None) -> list[str]:
    return [p for p in inspect.cleandoc(text or "").split("\n\n") if p.strip()]


def text_lines(page: str) -> list[str]:
    """The page's lines without panel borders at either end."""
    return [line.rstrip().rstrip("│╮╯").rstrip().lstrip("│╭╰") for line in page.splitlines()]


def spanned_lines(page: str, paragraph: str) -> list[str]:
    """The lines of `page` that show `paragraph`, found ignoring whitespace (so however the
    page wrapped it); fails if the paragraph's words are not all there, in order."""
    lines = text_lines(page)
    stream, owner = [], []
    for index, line in enumerate(lines):
        for char in line:
            if not char.isspace():
                stream.append(char)
                owner.append(index)
    wanted = "".join(paragraph.split())
    start = "".join(stream).find(wanted)
    assert start >= 0, f"not shown word for word: {paragraph!r}\n{page}"
    first, last = owner[start], owner[start + len(wanted) - 1]
    return lines[first : last + 1]


def underfull_breaks(lines: list[str]) -> list[str]:
    """Breaks after a line that had room for the next line's first word: a flowed paragraph
    has none (each line but the last is as full as the width lets it be)."""
    width = max(len(line.rstrip()) for line in lines)
    bad = []
    for line, following in itertools.pairwise(lines):
        end = line.rstrip()
        word = following.split()[0]
        space = 0 if end.endswith("-") else 1
        if len(end) + space + len(word) <= width:
            bad.append(f"{end.strip()!r} / {following.strip()!r}")
    return bad


def described_paragraphs(group: Any, name: str) -> list[str]:
    """What a page shows as prose: the command's help, and on the root page each command's
    first paragraph (its line in the command list)."""
    found = paragraphs(command_of(group, name).help)
    if not name:
        found += [paragraphs(command_of(group, n).help)[0] for n, _ in COMMANDS]
    return found


def options_of(group: Any, name: str) -> list[tuple[str, bool, str]]:
    """(long name, is a flag, help) of each option on a page, `--help` included."""
    found = [("--help", True, "Show this message and exit.")]
    for param in command_of(group, name).params:
        if param.param_type_name != "option" or getattr(param, "hidden", False):
            continue
        long_name = next(o for o in param.opts if o.startswith("--"))
        found.append((long_name, bool(param.is_flag), param.help or ""))
    return found


def declaration(page: str, long_name: str, help_text: str) -> str:
    """An option's row up to where its help starts: its names and any value placeholder."""
    row = re.compile(r"^\*?\s*(?:-\w+,?\s+)*" + re.escape(long_name) + r"(?![\w-])")
    start_of_help = " ".join(help_text.split()[:2])
    lines = text_lines(page)
    header = next(i for i, line in enumerate(lines) if re.fullmatch(r"[─\s]*Options[:─\s]*", line))
    for line in lines[header + 1 :]:
        line = line.strip()
        if row.match(line):
            head, _, _ = line.partition(start_of_help)
            return head
    raise AssertionError(f"no row for {long_name}\n{page}")


def placeholders(head: str) -> list[str]:
    return [t for t in re.split(r"[\s,/;]+", head) if t and t != "*" and not t.startswith("-")]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", NAMES, ids=IDS)
def test_paragraphs_are_flowed_to_the_width(
    pages: dict[tuple[int, str], str], group: Any, name: str, width: int
) -> None:
    page = pages[width, name]
    assert max(len(line) for line in page.splitlines()) <= width, page
    for paragraph in described_paragraphs(group, name):
        assert underfull_breaks(spanned_lines(page, paragraph)) == [], page
    lines = text_lines(page)
    for command, before, after in KNOWN_BAD_BREAKS:
        if command != name or width != BAD_BREAKS_WIDTH:
            continue
        for line, following in itertools.pairwise(lines):
            broken = line.rstrip().endswith(before) and following.strip().startswith(after)
            assert not broken, f"{before!r} / {after!r}\n{page}"


@pytest.mark.parametrize("name", NAMES, ids=IDS)
def test_only_options_that_take_a_value_show_a_placeholder(
    pages: dict[tuple[int, str], str], group: Any, name: str
) -> None:
    page = pages[WIDTH, name]
    assert "<bool>" not in page, page
    for long_name, is_flag, help_text in options_of(group, name):
        shown = placeholders(declaration(page, long_name, help_text))
        if is_flag:
            assert shown == [], (long_name, shown, page)
        else:
            assert len(shown) == 1, (long_name, shown, page)
        # The option's help is all there too (nothing taken for markup).
        spanned_lines(page, help_text)


def test_the_underfull_check_finds_a_line_broken_where_the_source_was() -> None:
    flowed = ["one two three four", "five six seven", "eight"]
    assert underfull_breaks(flowed) == []
    broken = ["one two three four", "five", "six seven eight"]
    assert underfull_breaks(broken) == ["'five' / 'six seven eight'"]


def test_bare_rlinfra_prints_the_help_and_no_empty_error() -> None:
    done = help_of()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Usage: rlinfra [OPTIONS] COMMAND [ARGS]..." in done.stdout, done.stdout
    assert "Error" not in done.stderr, done.stderr
