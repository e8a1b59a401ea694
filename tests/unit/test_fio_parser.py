"""fio's JSON: the launcher's write and read of a checkpoint shard (real fio 3.33 outputs), a
report with fio's other lines around it, and text that is not fio's."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.parsers.common import ParseError
from provisioner.parsers.fio import parse_fio_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fio"


def test_the_write_of_two_shards_of_32_mib():
    facts = parse_fio_json((FIXTURES / "fio-3.33_checkpoint_write_2jobs_32MiB.json").read_text())
    assert facts["version"] == "fio-3.33" and facts["errors"] == []
    assert facts["write"]["io_bytes"] == 2 * 32 * 2**20 and facts["read"]["io_bytes"] == 0
    assert facts["write"]["bw_bytes"] == 818400780 and facts["write"]["runtime_ms"] == 82


def test_the_read_back_and_a_report_inside_other_lines():
    text = (FIXTURES / "fio-3.33_checkpoint_read_2jobs_32MiB.json").read_text()
    facts = parse_fio_json(text)
    assert facts["read"]["io_bytes"] == 2 * 32 * 2**20 and facts["read"]["bw_bytes"] == 1290555076
    # json+normal: fio's header lines before, its normal report after
    wrapped = ("checkpoint: (g=0): rw=read, bs=(R) 4096KiB-4096KiB\nfio-3.33\nStarting 2 processes\n" + text
               + "\ncheckpoint: (groupid=0, jobs=2): err= 0: pid=1\n  read: IOPS=300, BW=1231MiB/s\n")
    assert parse_fio_json(wrapped) == facts


def test_a_job_error_is_named_and_other_text_refused():
    text = (FIXTURES / "fio-3.33_checkpoint_write_2jobs_32MiB.json").read_text()
    failed = text.replace('"error" : 0', '"error" : 5', 1)
    assert parse_fio_json(failed)["errors"] == ["checkpoint"]
    with pytest.raises(ParseError):
        parse_fio_json("fio: pid=0, err=2/file:filesetup.c:174, func=open, error=No such file or directory\n")
    with pytest.raises(ParseError):
        parse_fio_json('{"jobs": [{"jobname": "x"}]}')
