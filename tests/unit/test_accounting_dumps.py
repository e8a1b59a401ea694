"""The accounting dumps program: only a dump this cluster signed, owned and private, is chosen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.paths import PROJECT_ROOT

PROGRAM = PROJECT_ROOT / "roles" / "slurm" / "files" / "provision-slurm-accounting-dumps"


@pytest.fixture
def dumps(tmp_path: Path):
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(128))
    directory = tmp_path / "dumps"
    directory.mkdir()
    environment = {**os.environ, "PROVISION_DUMPS_DIR": str(directory), "PROVISION_MUNGE_KEY": str(key),
                   "PROVISION_CLUSTER": "lab", "PROVISION_DUMP_OWNERS": "root,slurm,"
                   + __import__("pwd").getpwuid(os.getuid()).pw_name}

    def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(PROGRAM), *args], capture_output=True, text=True,
                              env=env or environment)

    def dump(stamp: str, content: bytes = b"dump", sign: bool = True) -> Path:
        path = directory / f"slurm-accounting-{stamp}.sql.gz"
        path.write_bytes(content)
        path.chmod(0o600)
        if sign:
            assert run("sign", str(path)).returncode == 0
        return path

    return directory, environment, run, dump


def test_the_newest_signed_dump_is_chosen(dumps):
    directory, _, run, dump = dumps
    dump("20261201T000000Z")
    newest = dump("20261202T000000Z")
    chosen = run("choose")
    assert chosen.returncode == 0 and chosen.stdout.strip() == str(newest)
    assert oct((directory / f"{newest.name}.sig").stat().st_mode & 0o777) == "0o600"


def test_planted_altered_renamed_or_open_dumps_are_refused(dumps, tmp_path: Path):
    directory, environment, run, dump = dumps
    good = dump("20261201T000000Z")
    dump("20261203T000000Z", sign=False)  # planted: no signature
    altered = dump("20261204T000000Z")
    altered.write_bytes(b"DROP DATABASE mysql;")
    altered.chmod(0o600)
    renamed = dump("20261205T000000Z")  # a signed dump renamed to look newer
    os.rename(renamed, directory / "slurm-accounting-20261206T000000Z.sql.gz")
    os.rename(f"{renamed}.sig", directory / "slurm-accounting-20261206T000000Z.sql.gz.sig")
    readable = dump("20261207T000000Z")
    readable.chmod(0o644)
    link = directory / "slurm-accounting-20261208T000000Z.sql.gz"
    link.symlink_to(good)
    (directory / f"{link.name}.sig").symlink_to(f"{good}.sig")
    chosen = run("choose")
    assert chosen.stdout.strip() == str(good), chosen.stderr
    for reason in ("not a regular file", "mode 0644", "does not match", "No such file"):
        assert reason in chosen.stderr, chosen.stderr
    other_key = {**environment, "PROVISION_MUNGE_KEY": str(tmp_path / "other.key")}
    (tmp_path / "other.key").write_bytes(b"another cluster")
    refused = run("choose", env=other_key)
    assert refused.returncode == 3 and "no dump written by this cluster" in refused.stderr


def test_a_database_name_that_is_not_an_identifier_is_refused(dumps):
    _, _, run, dump = dumps
    dump("20261201T000000Z")
    result = run("restore", "x`; DROP DATABASE mysql; --")
    assert result.returncode == 2 and "not a database name" in result.stderr
