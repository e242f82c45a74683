"""Chaos in the suite: the miner killed with SIGKILL four times while ten owners answer two studies, half in pieces.

Every acknowledged answer is stored exactly once, every resend of one is its duplicate, both studies finish and
the audit log verifies (`tests/chaos.py`; `bench/chaos.py` runs it longer).
"""

from __future__ import annotations

import pytest

from tests.chaos import run_chaos
from tests.federation_helpers import deal

OWNERS = [f"site-{i}" for i in range(10)]


@pytest.mark.slow  # a miner process, killed and restarted four times
def test_four_sigkills_while_owners_submit_whole_and_in_pieces_lose_and_double_nothing(tmp_path, car):
    result = run_chaos(tmp_path, deal(*car[1:], OWNERS), kills=4, studies=2, seed=7)
    assert result.kills == 4 or len(result.acknowledged) == result.submissions
    assert not result.lost, f"acknowledged but lost: {sorted(result.lost)}"
    assert not result.duplicated, f"stored more than once: {result.duplicated}"
    assert not result.resends_not_duplicate, f"resends stored anew: {result.resends_not_duplicate}"
    assert len(result.stored) == result.submissions == 20
    assert result.studies_done == 2 and result.log_ok
    assert result.holds
