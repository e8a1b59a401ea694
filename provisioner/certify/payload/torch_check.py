#!/usr/bin/env python3
"""What the toolkit's torch sees on this node, as one JSON line: its version and CUDA build, the
GPUs it can use and, where it sees one, the result of a small NCCL all-reduce on GPU 0 (a
process group of one rank through a file store: no port, no network). Run by the certification
role's verify phase; torch only."""
from __future__ import annotations

import json
import os
import tempfile

import torch
import torch.distributed as dist


def nccl_all_reduce() -> str:
    """'ok', or what went wrong, for a 1 MiB all-reduce on GPU 0 with NCCL."""
    device = torch.device("cuda", 0)
    with tempfile.TemporaryDirectory() as folder:
        try:
            torch.cuda.set_device(device)
            dist.init_process_group("nccl", init_method=f"file://{os.path.join(folder, 'store')}", rank=0,
                                    world_size=1, device_id=device)
            values = torch.full((1 << 18,), 2.0, device=device)
            dist.all_reduce(values)
            torch.cuda.synchronize(device)
            correct = bool((values == 2.0).all().item())
            dist.destroy_process_group()
            return "ok" if correct else "wrong result"
        except Exception as error:
            return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"[:400]


def main() -> None:
    available = torch.cuda.is_available()
    facts = {
        "torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": available,
        "device_count": torch.cuda.device_count() if available else 0,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if available else [],
        "nccl_available": dist.is_nccl_available(), "gloo_available": dist.is_gloo_available(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "all_reduce": nccl_all_reduce() if available and dist.is_nccl_available() else None,
    }
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
