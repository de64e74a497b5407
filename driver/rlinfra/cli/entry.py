"""The entry point: the root options, then one line and an exit code for whatever went wrong."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Annotated

import typer

from rlinfra import __version__, ui
from rlinfra.cli.common import app, error_line
from rlinfra.errors import EXIT_USAGE, RlinfraError

INTERRUPTED = "interrupted; state is saved, re-run the same command to converge"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rlinfra {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Ray clusters for RL post-training."""


def main() -> None:
    try:
        code = app(standalone_mode=False)
        code = code if isinstance(code, int) else 0
        if code == 130:  # typer turns Ctrl-C into Exit(130)
            ui.err.print(INTERRUPTED)
        sys.exit(code)
    except RlinfraError as exc:
        if os.environ.get("RLINFRA_DEBUG"):
            traceback.print_exc()
        ui.err.print(error_line(exc), style="red", soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        ui.err.print(INTERRUPTED)
        sys.exit(130)
    except typer.Exit as exc:
        if exc.exit_code == 130:
            ui.err.print(INTERRUPTED)
        sys.exit(exc.exit_code)
    except EOFError:
        # Ctrl-D at a confirmation prompt: nothing was confirmed, nothing was done.
        ui.err.print("Error: no answer (end of input); nothing was changed")
        sys.exit(EXIT_USAGE)
    except Exception as exc:
        kind = _click_kind(exc)
        if kind is None:
            raise
        if kind == "abort":
            ui.err.print(INTERRUPTED)
            sys.exit(130)
        if kind == "help":
            # `rlinfra` with no arguments: the help page is the error's message; exit 2 as click.
            typer.echo(exc.format_message())  # type: ignore[attr-defined]
            sys.exit(EXIT_USAGE)
        ui.err.print(_click_line(exc), style="red", soft_wrap=True, markup=False, highlight=False)
        sys.exit(EXIT_USAGE if kind == "usage" else getattr(exc, "exit_code", 1) or 1)


def _click_kind(exc: BaseException) -> str | None:
    """What a command-line parser's exception is: "abort", "help" (no arguments given, where
    they show the help), "usage", "other" or None.

    Typer used to raise click's exceptions; newer releases raise their own copies of the same
    classes (a vendored click). Both are recognised by their class names, so a usage error is one
    line and exit 2 whichever is installed.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "Abort" in names:
        return "abort"
    if not hasattr(exc, "format_message"):
        return None
    if "NoArgsIsHelpError" in names:
        return "help"
    if "UsageError" in names:
        return "usage"
    if "ClickException" in names:
        return "other"
    return None


def _click_line(exc: BaseException) -> str:
    """One line: what was wrong, and the --help to read."""
    message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    command = getattr(ctx, "command_path", None)
    if not command or command == "rlinfra":
        # Some errors are raised before the command's context exists: name it from argv.
        words = [w for w in sys.argv[1:] if not w.startswith("-")]
        known = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
        command = f"rlinfra {words[0]}" if words and words[0] in known else "rlinfra"
    return f"Error: {message.rstrip('.')}. See `{command} --help`."
