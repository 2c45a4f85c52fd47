"""User-facing errors.

Anything a user can cause (a bad file, key or flag) raises MtError with one line that names the
file, line or key. The CLI prints that line and exits with `code`; tracebacks are kept for bugs.
"""

EXIT_USAGE = 2  # bad config, flag, file or checkpoint
EXIT_GATE = 1  # `mt eval --min-bleu` not met
EXIT_LINES = 1  # `mt translate`: some lines could not be translated (named on stderr)
EXIT_DIVERGED = 3  # training stopped: the loss or gradients stayed non-finite
# Training stopped by SIGTERM or SIGUSR1 (a scheduler's preemption notice) after writing last.pt:
# "requeue me", EX_TEMPFAIL of sysexits.h; the requeued job continues with --resume.
EXIT_REQUEUE = 75
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class MtError(Exception):
    """An error the user can fix; its message is one line, printed without a traceback."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[type, tuple[str, int]]:
        """Pickled with its exit code (a decoding worker's error crosses a pipe)."""
        return (type(self), (str(self), self.code))
