"""The cluster's munge key: where it comes from on each apply.

A new key is only ever made for a brand-new cluster. A key given in the inventory
(`slurm_munge_key`, base64, kept in Ansible Vault) is the cluster's key. Without one, the key
provisioning adopted (marked on every host it reached) is: a rebuilt controller holds none,
or only the key Debian's munge package made on install, so the key is recovered from the
surviving Slurm hosts before anything is sent: a new key would cut every node off the
controller and kill the jobs they run.
Nothing here ever returns or prints a key, only checksums and host names.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections import Counter
from typing import Any

# munge refuses keys outside these lengths (mungekey(8): 32 to 1024 bytes).
KEY_BYTES_MIN = 32
KEY_BYTES_MAX = 1024


def _decoded(key_base64: str) -> bytes:
    return base64.b64decode("".join(str(key_base64).split()), validate=True)


def munge_key_problem(key_base64: Any) -> str:
    """What is wrong with an inventory munge key ('' when nothing); never quotes the key."""
    # str(): a value from Ansible Vault arrives as an object that decrypts when read as text.
    text = "" if key_base64 is None or isinstance(key_base64, bool | int | float | list | dict) else str(key_base64)
    if not text.strip():
        return "must be the base64 text of the key (e.g. `base64 -w0 /etc/munge/munge.key`)"
    try:
        size = len(_decoded(text))
    except (binascii.Error, ValueError):
        return "is not valid base64 (give `base64 -w0 /etc/munge/munge.key`)"
    if not KEY_BYTES_MIN <= size <= KEY_BYTES_MAX:
        return f"decodes to {size} bytes; munge keys are {KEY_BYTES_MIN} to {KEY_BYTES_MAX} bytes"
    return ""


def munge_key_checksum(key_base64: str) -> str:
    """sha256 of the key's bytes, as Ansible's stat module reports a file's checksum."""
    return hashlib.sha256(_decoded(str(key_base64))).hexdigest()


def key_report(text: str) -> dict[str, Any]:
    """One host's `<key checksum> <mark>` line (each "none" when absent) as {key, adopted}: a key
    is the cluster's adopted key when provisioning marked it so (the mark holds its checksum).
    Debian's munge package makes a key of its own on install: such a key is never adopted."""
    fields = [*text.split(), "none", "none"][:2]
    key = None if fields[0] == "none" else fields[0]
    return {"key": key, "adopted": key is not None and fields[1] == key}


def munge_key_source(controller: str, survey: list[dict[str, Any]]) -> dict[str, str]:
    """Where the cluster's key comes from, given every Slurm host's key report.

    `survey` holds one entry per host as Ansible's looped command registers them (`item` the
    host, `stdout` its `<key checksum> <mark>` line; `unreachable` or `failed` where it did not
    answer). The cluster's key is the adopted key most hosts hold (the controller's copy
    preferred as the source). With no adopted key anywhere (a new cluster, or one provisioned
    before keys were marked): the controller's key, else the key most hosts hold, else a new
    key when every host answered. Returns {"action": "copy", "source": host, "checksum": c},
    {"action": "create", "source": controller} or {"action": "refuse", "reason": ...}."""
    reports: dict[str, dict[str, Any]] = {}
    silent: list[str] = []
    for entry in survey:
        host = str(entry.get("item"))
        if entry.get("unreachable") or entry.get("failed") or "stdout" not in entry:
            silent.append(host)
        else:
            reports[host] = key_report(str(entry["stdout"]))
    adopted = {host: str(r["key"]) for host, r in reports.items() if r["adopted"]}
    if adopted:
        return _majority(controller, adopted, "the cluster's (adopted) key")
    held = {host: str(r["key"]) for host, r in reports.items() if r["key"]}
    if controller in held:
        return {"action": "copy", "source": controller, "checksum": held[controller]}
    if held:
        return _majority(controller, held, "a key")
    if silent:
        return {"action": "refuse",
                "reason": f"no reachable Slurm host holds a munge key and {', '.join(sorted(silent))} did not "
                          "answer: one of them may hold the cluster's key (a new key would cut them off); "
                          "bring one back or give the key as slurm_munge_key"}
    return {"action": "create", "source": controller}


def _majority(controller: str, holders: dict[str, str], what: str) -> dict[str, str]:
    counts = Counter(holders.values())
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if len(ranked) > 1 and ranked[1][1] == ranked[0][1]:
        return {"action": "refuse",
                "reason": f"the Slurm hosts hold {len(counts)} different munge keys as {what}, none held by most "
                          f"of them ({', '.join(sorted(holders))}): give the cluster's key as slurm_munge_key"}
    checksum = ranked[0][0]
    sources = sorted(host for host, held in holders.items() if held == checksum)
    return {"action": "copy", "source": controller if controller in sources else sources[0], "checksum": checksum}
