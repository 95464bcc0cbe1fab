"""Error types. Failure has types: a user mistake, an invalid edit, an infrastructure fault.

- ``UserError``: bad usage or input. The CLI prints its one-line message and exits 2.
- ``InfraError``: something outside the harness failed (model server down after retries,
  sandbox would not start). Retried; never scored as 0; kept out of averages.
- A harness's own failures are *not* exceptions: they are run records with a status.
"""

from __future__ import annotations


class HarnessLearnError(Exception):
    """Base class of this package's exceptions."""


class UserError(HarnessLearnError):
    """Bad usage or input: the message is one line meant for the user (CLI exit 2)."""


class InfraError(HarnessLearnError):
    """An infrastructure failure (model server, sandbox start): retry, never score as 0."""


class MissingExtraError(UserError):
    """An optional dependency is not installed."""

    def __init__(self, what: str, extra: str, package: str | None = None) -> None:
        pkg = f" ({package})" if package else ""
        super().__init__(f"{what} needs the '{extra}' extra{pkg}: pip install 'harnesslearn[{extra}]'")


def disk_full(e: BaseException) -> bool:
    """``e`` says the disk (or the user's quota) is full: SQLite's SQLITE_FULL, or ENOSPC/EDQUOT. The CLI
    then exits 1 with one line: what was committed before stays intact and resumable."""
    import errno
    import sqlite3

    if isinstance(e, sqlite3.OperationalError):
        return "disk is full" in str(e)
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)
