"""Payloads on their own tag, received into a buffer posted before they are sent."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure.decode.dist import free_port  # noqa: E402
from measure.lifeline import run_ranks  # noqa: E402
from tests.measure.decode.payload_ranks import ENTRY  # noqa: E402


def test_a_posted_payload_receive_takes_the_next_payload_whatever_headers_come_between():
    main, rank = run_ranks(ENTRY, (free_port(),), world_size=2, timeout_s=120, what="comm")
    assert rank["first"] == [0.0, 1.0, 2.0, 3.0]
    assert rank["second"] == [10.0 + i for i in range(6)]  # the first 6 of the posted 8
    assert rank["header"] == [3, 5] and rank["third"] == [20.0, 21.0]
    assert rank["twice"] == "a payload receive is posted already"
    assert rank["stop"] == 6 and main["peers after drain"] == []


def test_a_payload_larger_than_the_posted_receive_is_refused():
    from measure.decode.comm import Comm, PendingRecv

    comm = Comm(k=1, device=torch.device("cpu"))
    comm.payload = PendingRecv(work=None, tensor=torch.empty(4), src=0)
    with pytest.raises(RuntimeError, match="payload of 5 torch.float32 elements does not fit"):
        comm.recv_payload(5, torch.float32)
    assert Comm(k=1, device=torch.device("meta")).payload_tag == 0  # no tags off the CPU
