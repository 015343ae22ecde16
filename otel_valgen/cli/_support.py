"""One error policy for every ``otel-valgen`` command, and the read-error reporter they share.

A usage error exits 2 and an operational error exits 1, each with one line on stderr (the
operational one names the fix); ``--verbose`` / ``-v``, on the group or any command, prints
the traceback above that line. Commands raise ``OperationalError``; anything else a command
raises is reported the same way, as unexpected.
"""

from __future__ import annotations

import errno
import traceback
from typing import IO, Any, ClassVar

import click

from otel_valgen.reader import ReadError

__all__ = ["OperationalError", "ValgenCommand", "ValgenGroup", "report_read_error"]

_VERBOSE = "otel_valgen.verbose"  # key in click's Context.meta, which a group shares with its commands


class OperationalError(click.ClickException):
    """A command could not do its work for a reason outside the command line; exit status 1."""

    exit_code: ClassVar[int] = 1

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem.rstrip('. ')}; {fix}")


class _Reported(click.ClickException):
    """An error already turned into its one line (and the traceback, kept for ``--verbose``)."""

    def __init__(self, line: str, details: str | None) -> None:
        super().__init__(" ".join(line.split()))  # one line, whatever the cause's message held
        self.details = details

    def show(self, file: IO[Any] | None = None) -> None:
        """Print the traceback (with ``--verbose``), then the one line."""
        if self.details:
            click.echo(self.details, file=file, err=file is None, nl=False)
        click.echo(f"Error: {self.message}", file=file, err=file is None)


class _UsageReported(_Reported):
    exit_code: ClassVar[int] = 2


class _OperationalReported(_Reported):
    exit_code: ClassVar[int] = 1


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_VERBOSE] = True


def _verbose_option() -> click.Option:
    return click.Option(
        ["-v", "--verbose"],
        is_flag=True,
        expose_value=False,
        is_eager=True,  # set before the other options are converted, so that their errors see it
        callback=_set_verbose,
        help="On error, print the traceback too.",
    )


def _reported(error: Exception, ctx: click.Context | None) -> _Reported:
    context = error.ctx if isinstance(error, click.UsageError) and error.ctx is not None else ctx
    details = None
    if context is not None and context.meta.get(_VERBOSE):
        details = "".join(traceback.format_exception(error))
    if isinstance(error, click.UsageError):
        where = f" (see '{context.command_path} --help')" if context is not None else ""
        return _UsageReported(error.format_message() + where, details)
    if isinstance(error, click.ClickException):
        return _OperationalReported(error.format_message(), details)
    if isinstance(error, OSError) and error.strerror:
        target = f": {error.filename}" if error.filename else ""
        return _OperationalReported(
            f"{error.strerror}{target}; check the path, its permissions and free space", details
        )
    return _OperationalReported(
        f"{type(error).__name__}: {error} (unexpected; --verbose prints the traceback)", details
    )


def _passes(error: Exception) -> bool:
    """Errors click itself handles: exits, aborts, a closed stdout."""
    if isinstance(error, click.exceptions.Exit | click.Abort | _Reported):
        return True
    return isinstance(error, OSError) and error.errno == errno.EPIPE


class ValgenCommand(click.Command):
    """A command under the ``otel-valgen`` error policy: ``--verbose``, and every error as one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(_verbose_option())

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        """Parse ``args``; a parse error becomes its one line."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except Exception as error:
            if _passes(error):
                raise
            raise _reported(error, parent) from error

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; any error becomes its one line."""
        try:
            return super().invoke(ctx)
        except Exception as error:
            if _passes(error):
                raise
            raise _reported(error, ctx) from error


class ValgenGroup(ValgenCommand, click.Group):
    """The ``otel-valgen`` group: its commands default to ``ValgenCommand``."""

    command_class = ValgenCommand


def report_read_error(error: ReadError) -> None:
    """Print one unreadable part of an input as ``warning: file[:line]: message``."""
    where = f"{error.path}:{error.line}" if error.line else error.path
    click.echo(f"warning: {where}: {error.message}", err=True)
