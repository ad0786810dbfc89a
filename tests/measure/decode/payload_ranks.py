"""A rank entry for ``tests.measure.decode.test_comm``: two gloo ranks exchange payloads the
way a ``dist`` task does (``measure.decode.comm``), in a process of their own."""

from __future__ import annotations

import os
from datetime import timedelta

ENTRY = "tests.measure.decode.payload_ranks:payload_entry"


def payload_entry(rank: int, port: int, progress) -> dict:
    """Rank 1 keeps a payload receive posted; rank 0 sends payloads of several sizes, a header
    between them, then drains. What rank 1 received."""
    import torch
    import torch.distributed as dist

    from measure.decode.comm import Comm

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    comm = Comm(k=1, device=torch.device("cpu"))
    out: dict = {}
    try:
        if rank == 0:
            comm.send_payload(torch.arange(4.0), 1, sized=True)  # received at once
            comm.send_payload(torch.arange(6.0) + 10, 1)  # fills the posted 8 from its start
            comm.send_header(1, 3, 5)
            comm.send_payload(torch.arange(2.0) + 20, 1)
            comm.drain_payloads(torch.float32)  # rank 1's last posted receive
            comm.send_header(1, 6)
            comm.flush()
            out["peers after drain"] = sorted(comm.payload_peers)
        else:
            out["first"] = comm.recv_payload(4, torch.float32).tolist()
            comm.post_payload(8, torch.float32)
            out["second"] = comm.recv_payload(6, torch.float32).tolist()
            comm.post_payload(8, torch.float32)
            out["header"] = comm.recv_header(0)[:2]
            out["third"] = comm.recv_payload(2, torch.float32).tolist()
            comm.post_payload(8, torch.float32)
            try:
                comm.post_payload(8, torch.float32)
            except RuntimeError as exc:
                out["twice"] = str(exc)
            comm.wait_posted_payload()
            out["stop"] = comm.recv_header(0)[0]
    finally:
        dist.destroy_process_group()
    return out
