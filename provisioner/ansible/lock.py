"""One apply/certify at a time per inventory: an flock'ed lock file naming its holder.

The kernel releases an flock when its holder dies, so a crashed run never leaves a lock
that blocks the next one; the file's content only says who holds it now.
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from provisioner.errors import InputError, InputProblem, LockHeldError

LOCK_FILE_NAME = ".provision.lock"
# Locks this process holds (a command made of several runs, e.g. replace-node, takes the lock
# once; the runs inside it take it again without refusing themselves).
_HELD: dict[Path, int] = {}


def _describe(holder: dict) -> str:
    return (f"`provision {holder.get('command', '?')}` (pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')}, user {holder.get('user', '?')}, since {holder.get('since', '?')})")


def _open_lock_file(path: Path, inventory_dir: Path) -> IO[str]:
    """The lock file, opened without following a link (a planted link would have the lock
    truncate its target); a folder where it cannot be created is bad input (exit 2)."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP:
            reason = "is a symbolic link: remove it (provision never follows a link to its lock file)"
        elif error.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            reason = (f"cannot be created ({error.strerror}): provision keeps its lock in the inventory folder "
                      f"{inventory_dir}; run as a user who may write there")
        else:
            reason = f"cannot be opened: {error.strerror}"
        raise InputError([InputProblem(str(path), "", reason)]) from None
    return os.fdopen(descriptor, "r+", encoding="utf-8")


@contextmanager
def inventory_lock(inventory_dir: Path, command: str, covers_nested: bool = False) -> Iterator[Path]:
    """Hold the inventory's lock for the duration of the block; raise LockHeldError if taken.

    With covers_nested, a command made of several runs (replace-node) holds it once and the
    runs it makes inside the block take it again without refusing themselves."""
    path = inventory_dir / LOCK_FILE_NAME
    key = path.resolve()
    if _HELD.get(key):
        _HELD[key] += 1
        try:
            yield path
        finally:
            _HELD[key] -= 1
        return
    handle = _open_lock_file(path, inventory_dir)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            try:
                holder = json.loads(handle.read() or "{}")
            except ValueError:
                holder = {}
            raise LockHeldError(
                f"inventory {inventory_dir} is locked by {_describe(holder)}; only one apply/certify may run "
                f"against an inventory at a time (lock file: {path})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({
            "command": command, "pid": os.getpid(), "host": socket.gethostname(), "user": getpass.getuser(),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        }))
        handle.flush()
        if covers_nested:
            _HELD[key] = 1
        try:
            yield path
        finally:
            _HELD.pop(key, None)
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()
