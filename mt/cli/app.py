"""The `mt` Typer app and its entry point: user errors become one line and an exit code.

User errors (MtError) print one line on stderr and exit with their code (a preempted training
run: `mt: stopped: ...` and exit 75, "requeue me"); Ctrl-C exits 130 and a
closed pipe (`mt translate | head`) exits quietly. Tracebacks are left for real bugs.
"""

from __future__ import annotations

import sys

import typer

from mt.device import yield_when_waiting
from mt.errors import EXIT_INTERRUPTED, EXIT_REQUEUE, MtError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train Transformer translation models and use them.",
)


def main() -> None:
    """Entry point: run the app, turning user errors and interrupts into one line + exit code."""
    yield_when_waiting()  # before any command imports torch, which starts OpenMP
    try:
        rc = app(standalone_mode=False)
    except MtError as err:
        kind = "stopped" if err.code == EXIT_REQUEUE else "error"  # preemption is no error
        print(f"mt: {kind}: {err}", file=sys.stderr)
        sys.exit(err.code)
    except KeyboardInterrupt:
        print("mt: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except Exception as err:
        # Usage errors (bad flags) come from the click that typer vendors; they know how to
        # show themselves. Anything else is a bug and keeps its traceback.
        if hasattr(err, "show") and hasattr(err, "exit_code"):
            err.show()
            sys.exit(err.exit_code)
        raise
    if rc == EXIT_INTERRUPTED:  # typer turns Ctrl-C into a return code of 130
        print("mt: interrupted", file=sys.stderr)
    if isinstance(rc, int) and rc:
        sys.exit(rc)
