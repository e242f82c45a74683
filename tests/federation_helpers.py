"""A provisioned federation on loopback for integration tests: kits, a miner, signed submissions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from common.federation.dial import dial_miner
from common.federation.kit import TlsFiles
from common.federation.pb import federation_pb2 as fpb
from common.federation.pb import federation_pb2_grpc as fgrpc
from common.federation.signing import load_signing_key, sign_payload
from common.federation.study import spec_from_mapping
from common.federation.wire import model_message, new_nonce, now_timestamp
from common.mechanisms import registry
from common.mechanisms.release import release as release_model
from common.trees.learners import make_learner
from miner_node.config import MinerConfig
from miner_node.server import RunningMiner, start_miner
from modelshare.provision import issue_throwaway_federation


@dataclass
class Federation:
    """Kits for a miner, an admin and owners; a running miner; stubs dialled with each kit."""

    kits: dict[str, Path]
    miner: RunningMiner | None = None
    channels: list[grpc.Channel] = field(default_factory=list)

    @property
    def address(self) -> str:
        assert self.miner is not None
        return f"localhost:{self.miner.port}"

    def miner_config(self) -> MinerConfig:
        config = MinerConfig.load(self.kits["miner"] / "miner.toml")
        return dataclasses.replace(config, listen="localhost:0")

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

    def stub(self, party: str, tls: TlsFiles | None = None) -> fgrpc.MinerStub:
        channel = dial_miner(self.address, tls or TlsFiles.in_kit(self.kits[party]), "miner")
        self.channels.append(channel)
        return fgrpc.MinerStub(channel)

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


def make_federation(tmp: Path, owners: list[str]) -> Federation:
    return Federation(issue_throwaway_federation(tmp / "kits", owners=owners, address="localhost:50051"))


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
    from common.federation.study import spec_schema
    from common.federation.wire import disclosure_from_pb

    schema = spec_schema(spec)
    tree = make_learner("multiway", schema, random_state=0).fit(X, y).tree_
    req = requirement if requirement is not None else (spec.requirement if spec.HasField("requirement") else None)
    release = release_model(mechanism or spec.mechanism, tree=tree, requirement=req, disclosure=disclosure_from_pb(spec.disclosure, where="spec"))
    message = model_message(release, study_id=spec.study_id, owner_id=owner)
    if mutate is not None:
        mutate(message)
    return sign_payload(message.SerializeToString(), fed.key(owner))


def signed_refusal(fed: Federation, owner: str, study_id: str, reason: str) -> fpb.SignedEnvelope:
    refusal = fpb.OwnerRefusal(study_id=study_id, owner_id=owner, reason=reason, nonce=new_nonce())
    refusal.timestamp.CopyFrom(now_timestamp())
    return sign_payload(refusal.SerializeToString(), fed.key(owner))
