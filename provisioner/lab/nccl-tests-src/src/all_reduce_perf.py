#!/usr/bin/env python3
"""Lab stand-in for nccl-tests' all_reduce_perf: real all-reduces, the real output format.

There are no GPUs in the lab, so the all-reduces run with torch.distributed on gloo over
the node's network, one process per Slurm task (as `srun --ntasks-per-node=<GPUs>
all_reduce_perf -g 1` launches the real one). Rank 0 prints the nccl-tests 2.17 table;
every rank prints NCCL-style INFO lines naming the transport the node's simulated HCAs
allow (NET/IB with GPUDirect RDMA when a fabric port is Active, NET/Socket otherwise), so
the certification's transport check reads what it reads on a real cluster.
"""
import argparse
import datetime
import io
import json
import os
import socket
import subprocess
import sys
import time

import torch
import torch.distributed as dist

STATE = "/var/lib/lab-hw/state.json"
TYPES = {"float": (torch.float32, 4), "half": (torch.float16, 2), "bfloat16": (torch.bfloat16, 2),
         "double": (torch.float64, 8), "int32": (torch.int32, 4)}


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.upper()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def node_state():
    try:
        with open(STATE) as handle:
            return json.load(handle)
    except OSError:
        return {}


def first_host():
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST") or socket.gethostname()
    hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return hosts.stdout.split()[0]


def info(message):
    prefix = f"{socket.gethostname()}:{os.getpid()}:{os.getpid()} [{os.environ.get('SLURM_LOCALID', '0')}]"
    print(f"{prefix} NCCL INFO {message}", flush=True)


def transport_lines(state, interface):
    ports = [(hca["name"], port) for hca in state.get("hcas", []) for port in hca.get("ports", [])
             if port.get("state") == "Active" and port.get("link_layer", "InfiniBand") == "InfiniBand"]
    if ports:
        names = " ".join(f"[{i}]{name}:{port['port']}/IB" for i, (name, port) in enumerate(ports))
        info(f"NET/IB : Using {names} ; OOB {interface}:<0>")
        return "NET/IB/0/GDRDMA"
    info(f"NET/Socket : Using [0]{interface}:<0>")
    return "NET/Socket/0"


def nccl_library():
    """The installed NCCL's version (the lab's libnccl2 stand-in): the real binary needs libnccl.so.2."""
    try:
        with open("/usr/share/nccl-lab/version") as handle:
            version, cuda = handle.read().strip().split("+cuda")
            return (*(int(part) for part in version.split(".")), cuda)
    except OSError:
        sys.stderr.write("all_reduce_perf: error while loading shared libraries: libnccl.so.2: "
                         "cannot open shared object file: No such file or directory\n")
        sys.exit(127)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-b", "--minbytes", default="32M")
    parser.add_argument("-e", "--maxbytes", default="32M")
    parser.add_argument("-f", "--stepfactor", type=int, default=2)
    parser.add_argument("-g", "--ngpus", type=int, default=1)
    parser.add_argument("-n", "--iters", type=int, default=20)
    parser.add_argument("-w", "--warmup_iters", type=int, default=5)
    parser.add_argument("-c", "--check", type=int, default=1)
    parser.add_argument("-d", "--datatype", default="float")
    parser.add_argument("-o", "--op", default="sum")
    parser.add_argument("-T", "--timeout", type=int, default=0)
    args = parser.parse_args()
    try:
        return run(args)
    except RuntimeError as error:
        # As nccl-tests' -T: an operation that waited longer than the timeout ends the test.
        if args.timeout > 0 and "timed out" in str(error).lower():
            print(f"{socket.gethostname()}: Test timeout ({args.timeout}s) src/common.cu:440", flush=True)
            sys.stderr.write(f"{error}\n")
            return 1
        raise


def visible_gpus():
    """The GPUs this task sees: CUDA_VISIBLE_DEVICES where set, else the node's device files."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return len([d for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()])
    return len([name for name in os.listdir("/dev") if name.startswith("nvidia") and name[6:].isdigit()])


def gpu_for_task():
    """nccl-tests' choice: NCCL_TESTS_DEVICE, else the task's rank among those of its node (its
    local rank: right when each task sees every GPU). A GPU it cannot see fails as cudaSetDevice does."""
    local = int(os.environ.get("SLURM_LOCALID", "0"))
    device = int(os.environ["NCCL_TESTS_DEVICE"]) if os.environ.get("NCCL_TESTS_DEVICE") else local
    if device >= visible_gpus():
        print(f"{socket.gethostname()}: Test CUDA failure common.cu:1304 'invalid device ordinal'", flush=True)
        sys.exit(1)
    return device


def run(args):
    major, minor, patch, cuda = nccl_library()
    state = node_state()
    device = gpu_for_task()
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    # The stand-in's own meeting point (the real one meets through MPI): outside the ephemeral
    # ports and the torchrun range.
    port = 30500 + int(os.environ.get("SLURM_JOB_ID", "0")) % 1000
    dist.init_process_group("gloo", init_method=f"tcp://{first_host()}:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout or 120))
    interface = os.environ.get("NCCL_SOCKET_IFNAME") or os.environ.get("GLOO_SOCKET_IFNAME") or "eth0"
    if rank == 0:
        info(f"NCCL version {major}.{minor}.{patch}+cuda{cuda}")
    via = transport_lines(state, interface)
    peer = (rank + 1) % world
    if world > 1:
        info(f"Channel 00/0 : {rank}[{rank}] -> {peer}[{peer}] [send] via {via}")
    gpus = state.get("gpus", [])
    local = int(os.environ.get("SLURM_LOCALID", "0"))
    gpu_name = gpus[local]["name"] if local < len(gpus) else "NVIDIA H100 80GB HBM3"
    names = [None] * world
    dist.all_gather_object(names, (socket.gethostname(), os.getpid(), device, gpu_name))
    dtype, width = TYPES[args.datatype]
    sizes, current = [], size(args.minbytes)
    while current <= size(args.maxbytes):
        sizes.append(current)
        current *= args.stepfactor
    out = sys.stdout if rank == 0 else io.StringIO()  # only rank 0 prints the table
    code = major * 10000 + minor * 100 + patch
    print(f"# nccl-tests version 2.17.8 nccl-headers={code} nccl-library={code}", file=out)
    print("# Collective test starting: all_reduce_perf", file=out)
    print(f"# nThread 1 nGpus {args.ngpus} minBytes {size(args.minbytes)} maxBytes {size(args.maxbytes)} "
          f"step: {args.stepfactor}(factor) warmup iters: {args.warmup_iters} iters: {args.iters} agg iters: 1 "
          f"validation: {args.check} graph: 0", file=out)
    print("#\n# Using devices", file=out)
    for r, (host, pid, device, name) in enumerate(names):
        print(f"#  Rank {r:2d} Group  0 Pid {pid:6d} on {host:>10} device {device:2d} [0000:{device:02x}:00] {name}",
              file=out)
    print("#", file=out)
    print("#                                                              out-of-place                       "
          "in-place          ", file=out)
    print("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw "
          "  busbw  #wrong ", file=out)
    print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s) "
          " (GB/s)         ", file=out)
    total, factor = 0.0, 2 * (world - 1) / world
    for nbytes in sizes:
        count = max(1, nbytes // width)
        tensor = torch.empty(count, dtype=dtype)
        results = []
        for _ in range(2):  # out-of-place, in-place (the same operation for gloo)
            tensor.fill_(rank + 1)
            dist.all_reduce(tensor)
            wrong = int((tensor != world * (world + 1) // 2).sum()) if args.check else -1
            for _ in range(args.warmup_iters):
                dist.all_reduce(tensor)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(tensor)
            seconds = (time.perf_counter() - start) / args.iters
            algbw = count * width / seconds / 1e9
            results.append((seconds * 1e6, algbw, algbw * factor, wrong))
        total += results[1][2]
        row = f"{count * width:12d}  {count:12d}  {args.datatype:>8}  {args.op:>6}  {-1:6d}"
        for time_us, algbw, busbw, wrong in results:
            row += f"  {time_us:7.1f}  {algbw:6.2f}  {busbw:6.2f}  {wrong:6d}" if wrong >= 0 else \
                f"  {time_us:7.1f}  {algbw:6.2f}  {busbw:6.2f}     N/A"
        print(row, file=out, flush=True)
    print("# Out of bounds values : 0 OK", file=out)
    print(f"# Avg bus bandwidth    : {total / len(sizes):.3f} ", file=out)
    print("#\n# Collective test concluded: all_reduce_perf\n#", file=out, flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
