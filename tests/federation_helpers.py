"""A provisioned federation on loopback for integration tests: kits, a miner, signed submissions.

Shared by the test modules (which import only from here, never from each other): the miner in
this process (`Federation.start`) or as the deployment runs it (`Federation.serve`, a separate
``modelshare miner serve`` process on port 0), owners' tables and configs, signed answers, and
`wait_until`, the one way a test waits: for a condition, up to a deadline, never for a fixed time.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import grpc
import numpy as np

from modelshare.common.data.datasets import load_dataset
from modelshare.common.data.regression import RegressionSchema
from modelshare.common.data.schema import CategoricalAttribute, NumericAttribute
from modelshare.common.federation.dial import dial_miner
from modelshare.common.federation.kit import TlsFiles
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.signing import load_signing_key, sign_payload
from modelshare.common.federation.study import spec_from_mapping
from modelshare.common.federation.wire import model_message, new_nonce, now_timestamp
from modelshare.common.mechanisms import registry
from modelshare.common.mechanisms.release import release as release_model
from modelshare.common.trees.learners import make_learner
from modelshare.miner_node.config import MinerConfig
from modelshare.miner_node.server import ReadyFile, RunningMiner, read_ready, start_miner
from modelshare.owner_node.config import OwnerConfig
from modelshare.owner_node.policy import Policy
from modelshare.provision import issue_throwaway_federation, set_miner_port

CLI = [sys.executable, "-m", "modelshare.cli"]
FINAL = ("done", "failed", "cancelled")  # the states a study ends in
POLL_SECONDS = 0.05  # between checks of a condition nothing announces (state in another process)

T = TypeVar("T")


def wait_until(predicate: Callable[[], T | None], timeout: float, what: str | Callable[[], str], *,
               wake: Callable[[float], object] | None = None) -> T:
    """Return the first true value of ``predicate()``; fail the test, naming ``what``, after ``timeout`` s.

    ``wake(seconds)`` blocks until something may have changed or ``seconds`` passed (a
    condition's ``wait``); without one, the condition is checked again every `POLL_SECONDS`
    (for state in another process, which announces nothing here). The deadline decides, not a
    sleep. ``what`` may be a callable, for a message that says how far things got.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}")
        if wake is not None:
            wake(min(remaining, 0.5))
        else:
            time.sleep(min(remaining, POLL_SECONDS))


class MinerProcess:
    """``modelshare miner serve`` in its own process, as deployed; `start` returns once it serves.

    Readiness is the miner's ready file naming this process (a killed miner leaves its file
    behind), so `start` waits on the miner, not on time, and learns the port it bound.
    """

    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.state_dir = MinerConfig.load(config).state_dir
        self.process: subprocess.Popen | None = None
        self.port = 0

    def start(self, timeout: float = 60) -> MinerProcess:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([*CLI, "miner", "serve", "--config", str(self.config)],
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        process = self.process

        def serving() -> ReadyFile | None:
            code = process.poll()
            if code is not None:
                raise AssertionError(f"the miner exited with status {code}:\n{self.log.read_text()[-4000:]}")
            ready = read_ready(self.state_dir)
            return ready if ready is not None and ready["pid"] == process.pid else None

        self.port = int(wait_until(serving, timeout, f"the miner's ready file (log: {self.log})")["port"])
        return self

    def kill(self) -> None:
        """SIGKILL: no clean stop, no chance to flush or to remove the ready file."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM (the miner stops cleanly), SIGKILL if it has not exited within 20 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Federation:
    """Kits for a miner, an admin and owners; a running miner; stubs dialled with each kit."""

    kits: dict[str, Path]
    miner: RunningMiner | MinerProcess | None = None
    channels: list[grpc.Channel] = field(default_factory=list)

    @property
    def address(self) -> str:
        assert self.miner is not None
        return f"localhost:{self.miner.port}"

    def miner_config(self) -> MinerConfig:
        config = MinerConfig.load(self.kits["miner"] / "miner.toml")
        return dataclasses.replace(config, listen="localhost:0")

    def __enter__(self) -> Federation:
        """``with`` runs a miner in this process for the block (`start`), then `close`: also when the block fails."""
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> RunningMiner:
        self.miner = start_miner(self.miner_config(), mechanisms=registry.names())
        return self.miner

    def restart(self) -> RunningMiner:
        assert self.miner is not None
        config = dataclasses.replace(self.miner_config(), listen=f"localhost:{self.miner.port}")
        self.miner.stop(grace=None)
        self.close_channels()
        self.miner = start_miner(config, mechanisms=registry.names())
        return self.miner

    def serve(self, log: Path) -> MinerProcess:
        """Start the miner as a separate process: on port 0 at first (the kits must say so, see
        `make_federation`), then, once `set_miner_port` has written the port it bound into every
        kit, on that port again, so owners' configs stay right across a kill and restart."""
        self.miner = MinerProcess(self.kits["miner"] / "miner.toml", log).start()
        set_miner_port(self.kits.values(), self.miner.port)
        return self.miner

    def wait_study(self, study_id: str, states: tuple[str, ...] = FINAL, timeout: float = 60) -> fpb.StudyStatus:
        """The study's status once it is in one of ``states`` (by default: done or failed).

        An in-process miner wakes the wait on its coordinator's state changes; a miner process is polled.
        """
        admin = self.stub("admin")
        seen: list[fpb.StudyStatus] = []

        def reached() -> fpb.StudyStatus | None:
            seen.append(admin.GetStudy(fpb.StudyRef(study_id=study_id), timeout=10))
            return seen[-1] if seen[-1].state in states else None

        def wake(seconds: float) -> None:
            assert isinstance(self.miner, RunningMiner)
            with self.miner.coordinator.changed:
                self.miner.coordinator.changed.wait(seconds)

        return wait_until(reached, timeout, lambda: f"study {study_id} to be {' or '.join(states)}; it is "
                          f"{seen[-1].state} ({seen[-1].reason})", wake=wake
                          if isinstance(self.miner, RunningMiner) else None)

    def owner_config(self, owner: str, **changes) -> OwnerConfig:
        """The owner's kit config, dialling this federation's miner (changed as ``changes`` say)."""
        config = OwnerConfig.load(self.kits[owner] / "owner.toml")
        return dataclasses.replace(config, **{"miner": self.address, **changes})

    def stub(self, party: str, tls: TlsFiles | None = None) -> MinerStubs:
        """Stubs of the miner's three services on one channel dialled with ``party``'s kit (or ``tls``)."""
        channel = dial_miner(self.address, tls or TlsFiles.in_kit(self.kits[party]), "miner")
        self.channels.append(channel)
        return MinerStubs(channel)

    def key(self, party: str):
        return load_signing_key(self.kits[party] / "signing.key")

    def close_channels(self) -> None:
        for channel in self.channels:
            channel.close()
        self.channels.clear()

    def close(self) -> None:
        self.close_channels()
        if self.miner is not None:
            self.miner.stop(grace=None)


class MinerStubs:
    """The miner's three services on one channel, each method reachable by its name (``stubs.Poll``,
    ``stubs.CreateStudy``, ``stubs.Health``), so a test can call any party's methods with any party's kit."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.exchange = fgrpc.OwnerExchangeStub(channel)
        self.admin = fgrpc.StudyAdminStub(channel)
        self.miner = fgrpc.MinerStub(channel)

    def __getattr__(self, name: str):
        for stub in (self.exchange, self.admin, self.miner):
            if hasattr(stub, name):
                return getattr(stub, name)
        raise AttributeError(name)


def make_federation(tmp: Path, owners: list[str], *, address: str = "localhost:50051", owner_data=None,
                    policy: dict | None = None) -> Federation:
    """A throw-away federation's kits under ``tmp``; `Federation.start` ignores the port of ``address``
    (it binds port 0), `Federation.serve` needs ``address="localhost:0"``."""
    return Federation(issue_throwaway_federation(tmp / "kits", owners=owners, address=address, owner_data=owner_data,
                                                 policy=policy))


def deal(X: np.ndarray, y: np.ndarray, owners: list[str], seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The rows dealt at random to ``owners``: owner -> (X, y) of its part."""
    parts = np.random.default_rng(seed).permutation(len(y)) % len(owners)
    return {o: (X[parts == i], y[parts == i]) for i, o in enumerate(owners)}


def car_tables(tmp: Path, owners: list[str]) -> dict[str, tuple[str, str]]:
    """The car table dealt at random to ``owners``, one CSV each: owner -> (path, class column)."""
    table = load_dataset("car")
    parts = np.random.default_rng(1).permutation(len(table.frame)) % len(owners)
    data = {}
    for i, owner in enumerate(owners):
        path = tmp / f"{owner}.csv"
        table.frame[parts == i].to_csv(path, index=False)
        data[owner] = (str(path), table.schema.class_name)
    return data


def make_owner_config(kit: Path, data_path: Path, *, class_column: str | None = None, policy: Policy | None = None,
                 insecure: bool = False) -> OwnerConfig:
    """A hand-made config of owner "site-a" whose kit files would lie in ``kit`` (not read here)."""
    return OwnerConfig(
        path=kit / "owner.toml", name="site-a", miner="localhost:1", miner_name="miner",
        state_dir=kit / "state", signing_key=kit / "signing.key", roster=kit / "roster.json",
        tls=TlsFiles.in_kit(kit), data_path=data_path, class_column=class_column, policy=policy or Policy(),
        insecure=insecure,
    )


def study_spec(study_id: str, *, dataset: str = "car", owners: list[str] | None = None, quorum: int = 0,
               mechanism: str = "apt", requirement: str | None = "k-anonymity:k=5", disclosure: str = "hit_miss",
               deadline_minutes: float = 10, global_models: tuple[str, ...] = ("decision-tree",),
               max_depth: int | None = None) -> fpb.StudySpec:
    release: dict = {"mechanism": mechanism, "disclosure": disclosure}
    if requirement is not None:
        release["requirement"] = requirement
    training: dict = {"learner": "multiway"}
    if max_depth is not None:
        training["max_depth"] = max_depth
    data = {
        "study": {"id": study_id, "quorum": quorum, "deadline_minutes": deadline_minutes, "owners": owners or []},
        "schema": {"dataset": dataset},
        "release": release,
        "training": training,
        "mining": {"global_models": list(global_models), "pgen_scale": 1},
    }
    return spec_from_mapping(data).spec


def signed_model(fed: Federation, owner: str, spec: fpb.StudySpec, X, y, *, requirement: str | None = None,
                 mechanism: str | None = None, mutate=None) -> fpb.SignedEnvelope:
    """Train, release as the study asks (or as overridden), and sign as ``owner``."""
    from modelshare.common.federation.wire import disclosure_from_pb

    schema = study_from_pb(spec).schema
    assert not isinstance(schema, RegressionSchema), "signed_model trains a classification tree"
    tree = make_learner("multiway", schema, random_state=0).fit(X, y).tree_
    req = requirement if requirement is not None else (spec.requirement if spec.HasField("requirement") else None)
    release = release_model(mechanism or spec.mechanism, tree=tree, requirement=req,
                            disclosure=disclosure_from_pb(spec.disclosure, where="spec"))
    message = model_message(release, study_id=spec.study_id, owner_id=owner)
    if mutate is not None:
        mutate(message)
    return sign_payload(message.SerializeToString(), fed.key(owner))


def signed_refusal(fed: Federation, owner: str, study_id: str, reason: str) -> fpb.SignedEnvelope:
    refusal = fpb.OwnerRefusal(study_id=study_id, owner_id=owner, reason=reason, nonce=new_nonce())
    refusal.timestamp.CopyFrom(now_timestamp())
    return sign_payload(refusal.SerializeToString(), fed.key(owner))


# ---------------------------------------------------------------- a regression table
REGRESSION_SCHEMA = RegressionSchema(
    (NumericAttribute("x1", 0.0, 1.0), NumericAttribute("x2", 0.0, 1.0),
     CategoricalAttribute("colour", ("red", "green", "blue"))),
    NumericAttribute("y", 0.0, 10.0),
)


def regression_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `REGRESSION_SCHEMA`: y = 2 + 6 x1 + [colour is
    red] + noise, within the public bounds 0..10; x2 is noise."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0, 1, n), rng.uniform(0, 1, n), rng.integers(0, 3, n)]).astype(np.float64)
    return X, np.clip(2 + 6 * X[:, 0] + (X[:, 2] == 0) + rng.normal(0, 0.3, n), 0.0, 10.0)
