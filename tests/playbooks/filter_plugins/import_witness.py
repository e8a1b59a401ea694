"""A filter plugin that records which process imported it (for the runner tests).

On import it appends its process id to the file named by IMPORT_WITNESS_FILE, if set.
"""

from __future__ import annotations

import os

_WITNESS = os.environ.get("IMPORT_WITNESS_FILE")
if _WITNESS:
    with open(_WITNESS, "a", encoding="utf-8") as witness:
        witness.write(f"{os.getpid()}\n")


def witnessed(value: object) -> object:
    return value


class FilterModule:
    def filters(self) -> dict:
        return {"witnessed": witnessed}
