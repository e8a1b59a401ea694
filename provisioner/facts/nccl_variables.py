"""The NCCL environment variables NCCL itself reads (user guide, 'Environment Variables'),
each with the type of value NCCL parses.

NCCL ignores a variable it does not know, so a typo such as `NCCL_IB_TIMOUT` silently
leaves the default in force; a value it cannot parse (`NCCL_IB_TIMEOUT=fast`) is dropped
with at most a warning in a log nobody reads. Every `NCCL_*` name and value in an
inventory is checked against this table, and values are rendered the way NCCL reads them.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

Value = str | int | float | bool


@dataclass(frozen=True)
class Integer:
    """An integer (NCCL parses with strtoll base 0, so 0x-hexadecimal works too)."""

    minimum: int | None = None
    maximum: int | None = None

    def problem(self, value: Value) -> str | None:
        number = _integer(value)
        if number is None:
            return "an integer"
        if (self.minimum is not None and number < self.minimum) or (self.maximum is not None and number > self.maximum):
            low = "" if self.minimum is None else str(self.minimum)
            high = "" if self.maximum is None else str(self.maximum)
            return f"an integer in {low}..{high}"
        return None

    def render(self, value: Value) -> str:
        return str(_integer(value))


@dataclass(frozen=True)
class Flag:
    """0 or 1 (YAML true/false are accepted and written as 1/0)."""

    def problem(self, value: Value) -> str | None:
        return None if _flag(value) is not None else "0 or 1 (or true/false)"

    def render(self, value: Value) -> str:
        return str(_flag(value))


@dataclass(frozen=True)
class Choice:
    """One word of a fixed set (case-insensitive, as NCCL compares), or an integer level."""

    words: tuple[str, ...]
    integers: bool = False

    def problem(self, value: Value) -> str | None:
        if isinstance(value, str) and value.upper() in {w.upper() for w in self.words}:
            return None
        if self.integers and _integer(value) is not None:
            return None
        return "one of " + ", ".join(self.words) + (" (or an integer level)" if self.integers else "")

    def render(self, value: Value) -> str:
        return str(value)


@dataclass(frozen=True)
class SelectionList:
    """NCCL_ALGO / NCCL_PROTO: `Ring,Tree`, `^Tree` (all but), or per collective
    `allreduce:tree,ring;broadcast:ring`."""

    words: tuple[str, ...]

    def problem(self, value: Value) -> str | None:
        if not isinstance(value, str) or not value.strip():
            return "a comma-separated list of " + ", ".join(self.words)
        known = {w.lower() for w in self.words}
        for part in value.split(";"):
            selection = part.split(":", 1)[1] if ":" in part else part
            for word in selection.removeprefix("^").split(","):
                if word.strip().lower() not in known:
                    return f"a comma-separated list of {', '.join(self.words)} ({word.strip()!r} is none of them)"
        return None

    def render(self, value: Value) -> str:
        return str(value)


@dataclass(frozen=True)
class Text:
    """Free text (interface names, paths, HCA lists); must be one line."""

    def problem(self, value: Value) -> str | None:
        if isinstance(value, bool) or not isinstance(value, str | int) or "\n" in str(value) or not str(value):
            return "a one-line, non-empty string"
        return None

    def render(self, value: Value) -> str:
        return str(value)


def _integer(value: Value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)
        except ValueError:
            return None
    return None


def _flag(value: Value) -> int | None:
    if isinstance(value, bool):
        return int(value)
    number = _integer(value)
    return number if number in (0, 1) else None


INT, FLAG, TEXT = Integer(), Flag(), Text()
NON_NEGATIVE, POSITIVE = Integer(minimum=0), Integer(minimum=1)
LEVELS = Choice(("LOC", "NVL", "PIX", "PXB", "PHB", "SYS"), integers=True)
ADDRESS_FAMILY = Choice(("AF_INET", "AF_INET6"))

NCCL_VARIABLE_TYPES: dict[str, Integer | Flag | Choice | SelectionList | Text] = {
    # system configuration
    "NCCL_SOCKET_IFNAME": TEXT,
    "NCCL_SOCKET_FAMILY": ADDRESS_FAMILY,
    "NCCL_SOCKET_RETRY_CNT": NON_NEGATIVE,
    "NCCL_SOCKET_RETRY_SLEEP_MSEC": NON_NEGATIVE,
    "NCCL_SOCKET_NTHREADS": Integer(1, 16),
    "NCCL_NSOCKS_PERTHREAD": Integer(1, 64),
    "NCCL_CROSS_NIC": Integer(0, 2),
    "NCCL_IB_HCA": TEXT,
    # 4.096 us x 2^timeout; the InfiniBand field is 5 bits
    "NCCL_IB_TIMEOUT": Integer(1, 31),
    # a 3-bit field in the InfiniBand queue pair
    "NCCL_IB_RETRY_CNT": Integer(0, 7),
    "NCCL_IB_GID_INDEX": Integer(-1, 255),
    "NCCL_IB_ADDR_FAMILY": ADDRESS_FAMILY,
    "NCCL_IB_ADDR_RANGE": TEXT,
    "NCCL_IB_ROCE_VERSION_NUM": Integer(1, 2),
    "NCCL_IB_SL": Integer(0, 15),
    "NCCL_IB_TC": Integer(0, 255),
    "NCCL_IB_FIFO_TC": Integer(0, 255),
    "NCCL_IB_RETURN_ASYNC_EVENTS": FLAG,
    "NCCL_IB_PKEY": Integer(0, 0xFFFF),
    "NCCL_IB_USE_INLINE": FLAG,
    "NCCL_IB_QPS_PER_CONNECTION": Integer(1, 128),
    "NCCL_IB_SPLIT_DATA_ON_QPS": FLAG,
    "NCCL_IB_CUDA_SUPPORT": FLAG,
    "NCCL_IB_PCI_RELAXED_ORDERING": Integer(0, 2),
    "NCCL_IB_ADAPTIVE_ROUTING": FLAG,
    "NCCL_IB_AR_THRESHOLD": NON_NEGATIVE,
    "NCCL_IB_ECE_ENABLE": FLAG,
    "NCCL_IB_MERGE_VFS": FLAG,
    "NCCL_IB_MERGE_NICS": FLAG,
    "NCCL_IB_DISABLE": FLAG,
    "NCCL_IB_ROUTABLE_FLID_GID_INDEX": Integer(-1, 255),
    "NCCL_IB_WARN_RAIL_LOCAL": FLAG,
    "NCCL_OOB_NET_ENABLE": FLAG,
    "NCCL_OOB_NET_IFNAME": TEXT,
    "NCCL_UID_STAGGER_THRESHOLD": NON_NEGATIVE,
    "NCCL_UID_STAGGER_RATE": NON_NEGATIVE,
    "NCCL_NET": TEXT,
    "NCCL_NET_PLUGIN": TEXT,
    "NCCL_TUNER_PLUGIN": TEXT,
    "NCCL_PROFILER_PLUGIN": TEXT,
    "NCCL_ENV_PLUGIN": TEXT,
    "NCCL_IGNORE_CPU_AFFINITY": FLAG,
    "NCCL_CONF_FILE": TEXT,
    "NCCL_DEBUG": Choice(("VERSION", "WARN", "INFO", "ABORT", "TRACE")),
    "NCCL_DEBUG_FILE": TEXT,
    "NCCL_DEBUG_SUBSYS": TEXT,
    "NCCL_DEBUG_TIMESTAMP_FORMAT": TEXT,
    "NCCL_DEBUG_TIMESTAMP_LEVELS": TEXT,
    "NCCL_COLLNET_ENABLE": FLAG,
    "NCCL_COLLNET_NODE_THRESHOLD": NON_NEGATIVE,
    "NCCL_CONNECT_ROUND_MAX_PEERS": POSITIVE,
    "NCCL_TOPO_FILE": TEXT,
    "NCCL_TOPO_DUMP_FILE": TEXT,
    "NCCL_SET_THREAD_NAME": FLAG,
    "NCCL_HOSTID": TEXT,
    "NCCL_RAS_ENABLE": FLAG,
    "NCCL_RAS_ADDR": TEXT,
    "NCCL_RAS_TIMEOUT_FACTOR": POSITIVE,
    "NCCL_MNNVL_ENABLE": Integer(0, 2),
    "NCCL_MNNVL_UUID": TEXT,
    "NCCL_MNNVL_CLIQUE_ID": INT,
    "NCCL_CUMEM_ENABLE": FLAG,
    "NCCL_CUMEM_HOST_ENABLE": FLAG,
    "NCCL_DMABUF_ENABLE": FLAG,
    "NCCL_NETDEVS_POLICY": TEXT,
    "NCCL_WIN_ENABLE": FLAG,
    # debugging and tuning
    "NCCL_P2P_DISABLE": FLAG,
    "NCCL_P2P_LEVEL": LEVELS,
    "NCCL_P2P_DIRECT_DISABLE": FLAG,
    "NCCL_P2P_READ_ENABLE": FLAG,
    "NCCL_P2P_USE_CUDA_MEMCPY": FLAG,
    "NCCL_P2P_NET_CHUNKSIZE": POSITIVE,
    "NCCL_P2P_NVL_CHUNKSIZE": POSITIVE,
    "NCCL_P2P_PCI_CHUNKSIZE": POSITIVE,
    "NCCL_P2P_LL_THRESHOLD": NON_NEGATIVE,
    "NCCL_P2P_PXN_LEVEL": Integer(0, 2),
    "NCCL_PXN_DISABLE": FLAG,
    "NCCL_SHM_DISABLE": FLAG,
    "NCCL_SHM_USE_CUDA_MEMCPY": FLAG,
    "NCCL_SHM_MEMCPY_MODE": Integer(1, 3),
    "NCCL_SHM_LOCALITY": Integer(1, 2),
    "NCCL_BUFFSIZE": POSITIVE,
    "NCCL_NTHREADS": Integer(64, 512),
    "NCCL_MAX_NCHANNELS": POSITIVE,
    "NCCL_MIN_NCHANNELS": POSITIVE,
    "NCCL_MAX_P2P_NCHANNELS": POSITIVE,
    "NCCL_MIN_P2P_NCHANNELS": POSITIVE,
    "NCCL_MAX_CTAS": POSITIVE,
    "NCCL_MIN_CTAS": POSITIVE,
    "NCCL_CGA_CLUSTER_SIZE": Integer(0, 8),
    "NCCL_NCHANNELS_PER_NET_PEER": POSITIVE,
    "NCCL_CHECKS_DISABLE": FLAG,
    "NCCL_CHECK_POINTERS": FLAG,
    "NCCL_LAUNCH_MODE": Choice(("PARALLEL", "GROUP")),
    "NCCL_NET_GDR_LEVEL": LEVELS,
    "NCCL_NET_GDR_READ": FLAG,
    "NCCL_NET_GDR_C2C": FLAG,
    "NCCL_NET_SHARED_BUFFERS": FLAG,
    "NCCL_NET_SHARED_COMMS": FLAG,
    "NCCL_NET_DISABLE_INTRA": FLAG,
    "NCCL_NET_FORCE_FLUSH": FLAG,
    "NCCL_NET_MERGE_LEVEL": Choice(("LOC", "PORT", "PIX", "PXB", "PHB", "SYS"), integers=True),
    "NCCL_SINGLE_RING_THRESHOLD": NON_NEGATIVE,
    "NCCL_LL_THRESHOLD": NON_NEGATIVE,
    "NCCL_LL128_THRESHOLD": NON_NEGATIVE,
    "NCCL_TREE_THRESHOLD": NON_NEGATIVE,
    "NCCL_ALGO": SelectionList(("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")),
    "NCCL_PROTO": SelectionList(("LL", "LL128", "Simple")),
    "NCCL_NVB_DISABLE": FLAG,
    "NCCL_NVLS_ENABLE": Integer(0, 2),
    "NCCL_NVLS_CHUNKSIZE": POSITIVE,
    "NCCL_NVLS_NCHANNELS": POSITIVE,
    "NCCL_RUNTIME_CONNECT": FLAG,
    "NCCL_GRAPH_REGISTER": FLAG,
    "NCCL_GRAPH_MIXING_SUPPORT": FLAG,
    "NCCL_LOCAL_REGISTER": FLAG,
    "NCCL_LEGACY_CUDA_REGISTER": FLAG,
    "NCCL_WORK_FIFO_DEPTH": POSITIVE,
    "NCCL_WORK_FIFO_BYTES": POSITIVE,
    "NCCL_GDRCOPY_ENABLE": FLAG,
    "NCCL_GDRCOPY_FLUSH_ENABLE": FLAG,
    "NCCL_GDRCOPY_SYNC_ENABLE": FLAG,
    "NCCL_CTA_POLICY": NON_NEGATIVE,
    "NCCL_COMM_BLOCKING": FLAG,
    "NCCL_WARN_ENABLE_DEBUG_INFO": FLAG,
    "NCCL_ALLOC_P2P_NET_LL_BUFFERS": FLAG,
    "NCCL_CREATE_THREAD_CONTEXT": FLAG,
    "NCCL_COMM_SPLIT_SHARE_RESOURCES": FLAG,
    "NCCL_PROXY_PROFILE": TEXT,
    "NCCL_ENABLE_TRACE": FLAG,
}

KNOWN_NCCL_VARIABLES: frozenset[str] = frozenset(NCCL_VARIABLE_TYPES)
_NAME = re.compile(r"NCCL_[A-Z0-9_]+")


def unknown_variable_message(name: str) -> str:
    """Explain why `name` is rejected, with the closest known names as a hint."""
    close = difflib.get_close_matches(name, sorted(KNOWN_NCCL_VARIABLES), n=2, cutoff=0.75)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"unknown NCCL variable {name!r}: NCCL would silently ignore it{hint}"


def variable_problem(name: Any, value: Any) -> str | None:
    """Why `name: value` is not a setting NCCL would apply, or None when it is.

    A value of None (YAML `~`) is accepted: in an override it removes a profile default.
    """
    name = str(name)
    if not _NAME.fullmatch(name):
        return f"{name!r} is not an NCCL variable (names are NCCL_ followed by capitals, digits and _)"
    if name not in NCCL_VARIABLE_TYPES:
        return unknown_variable_message(name)
    if value is None:
        return None
    if not isinstance(value, str | int | float | bool):
        return f"{name} must be a single value, not a {type(value).__name__}"
    expected = NCCL_VARIABLE_TYPES[name].problem(value)
    return None if expected is None else f"{name} must be {expected} (got {value!r})"


def render_value(name: str, value: Value) -> str:
    """The value as NCCL reads it from the environment or nccl.conf (true -> 1)."""
    return NCCL_VARIABLE_TYPES[name].render(value)
