"""Structured logs: every answered submission carries its study, owner and outcome as fields."""

from __future__ import annotations

import io
import json
import logging

import grpc
import pytest

from modelshare import logs
from modelshare.common.federation.pb import federation_pb2 as fpb
from tests.federation_helpers import make_federation, signed_model, study_spec


def test_json_lines_keep_the_structured_fields(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(logs.sys, "stderr", stream)
    logs.configure_logging(json_lines=True)
    try:
        logging.getLogger("modelshare.miner").info("study %s: accepted", "s1",
                                                   extra={"study": "s1", "owner": "site-a", "outcome": "accepted"})
        logging.getLogger("modelshare.miner").info("no fields here")
    finally:
        root = logging.getLogger("modelshare")
        root.handlers[:] = []
        root.propagate = True
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["study"] == "s1" and first["owner"] == "site-a" and first["outcome"] == "accepted"
    assert first["message"] == "study s1: accepted" and first["level"] == "info"
    assert not set(logs.FIELDS) & set(second)


def test_the_miner_logs_accepted_and_rejected_submissions_with_their_fields(tmp_path, car, caplog):
    schema, X, y = car
    with make_federation(tmp_path, ["site-a", "site-b"]) as fed:
        spec = fed.stub("admin").CreateStudy(fpb.CreateStudyRequest(spec=study_spec("logged")), timeout=30).spec
        with caplog.at_level(logging.INFO, logger="modelshare.miner"):
            fed.stub("site-a").Submit(signed_model(fed, "site-a", spec, X[:400], y[:400]), timeout=60)
            with pytest.raises(grpc.RpcError):  # signed by site-b, sent over site-a's identity
                fed.stub("site-a").Submit(signed_model(fed, "site-b", spec, X[400:800], y[400:800]), timeout=60)
    outcomes = {(getattr(r, "study", None), getattr(r, "outcome", None)) for r in caplog.records}
    assert ("logged", "accepted") in outcomes
    assert any(o and o.startswith("rejected:PERMISSION_DENIED") for _, o in outcomes)
    accepted = next(r for r in caplog.records if getattr(r, "outcome", None) == "accepted")
    assert accepted.owner == "site-a"
