"""How many times one owner answer decodes the study's schema and parses a requirement (issue 32's measure).

Policy, budget, training, release, the owner's own audit and signing, on Car under (5,2)-diversity; the call
counts come from cProfile. Run: ``python bench/study_decodes.py``.
"""
import cProfile
import pstats
import tempfile

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from modelshare.common.data.datasets import load_dataset
from modelshare.common.federation.serde import study_from_pb
from modelshare.common.federation.study import spec_from_mapping
from modelshare.owner_node.budget import Ledger
from modelshare.owner_node.policy import Policy
from modelshare.owner_node.training import prepare_submission

spec = spec_from_mapping({"study": {"id": "s"}, "schema": {"dataset": "car"},
                          "release": {"mechanism": "apt", "requirement": "cl-diversity:c=5,l=2",
                                      "disclosure": "hit_miss"}}).spec
table = load_dataset("car")
X, y = table.schema.encode(table.frame)
policy = Policy(mechanisms=("apt",))
ledger = Ledger(tempfile.mkdtemp())
key = Ed25519PrivateKey.generate()


def answer() -> None:
    study = study_from_pb(spec)
    policy.findings(study, "miner", ledger)
    ledger.over_cap(study, None, None)
    prepare_submission(study, X, y, owner_id="a", key=key)


prof = cProfile.Profile()
prof.runcall(answer)
stats = pstats.Stats(prof)
for (file, _line, name), (_cc, nc, *_rest) in stats.stats.items():
    if name in ("schema_from_pb", "parse_requirement", "study_from_pb"):
        print(f"{name}: {nc} calls ({file.split('/work/main/')[-1]})")
