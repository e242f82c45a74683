"""What `modelshare simulate` writes before it starts any process: the study file per mechanism."""

from __future__ import annotations

from modelshare.cli import build_parser
from modelshare.common.federation.config_file import read_toml
from modelshare.common.federation.study import load_study_file
from modelshare.common.mechanisms import registry
from modelshare.owner_node.policy import Policy
from modelshare.simulate import prepare


def _prepare(tmp_path, *flags):
    args = build_parser().parse_args(["simulate", "--dataset", "car", "--owners", "2", *flags])
    prepare(args, tmp_path)
    return load_study_file(tmp_path / "study.toml").study


def test_kanon_rdt_studies_get_the_dps_default_counts_disclosure_and_a_depth(tmp_path):
    spec = _prepare(tmp_path, "--mechanism", "kanon-rdt")
    assert spec.mechanism == "kanon-rdt" and str(spec.requirement) == registry.get("kanon-rdt").default_requirement
    assert spec.training.max_depth == registry.get("kanon-rdt").default_max_depth
    assert spec.disclosure == "counts"


def test_apt_studies_keep_the_papers_default_requirement(tmp_path):
    spec = _prepare(tmp_path)
    assert spec.mechanism == "apt" and str(spec.requirement) == "cl-diversity:c=5,l=2"


def test_a_per_leaf_requirement_is_allowed_by_the_simulated_sites_and_only_then(tmp_path):
    """The paper's per-leaf promise needs a site's consent (`[policy] per_leaf_diversity`): simulate, whose user asked
    for it, gives it to its own owners; the default study keeps every site's default refusal of it."""
    spec = _prepare(tmp_path / "leaf", "--requirement", "cl-diversity:c=5,l=2,scope=leaf")
    assert str(spec.requirement) == "cl-diversity:c=5,l=2,scope=leaf"
    assert _policy(tmp_path / "leaf").per_leaf_diversity
    _prepare(tmp_path / "default")
    assert not _policy(tmp_path / "default").per_leaf_diversity


def _policy(root) -> Policy:
    """owner-1's `[policy]` as simulate wrote it (its miner address is filled in only when the miner starts)."""
    owner = read_toml(root / "kits" / "owner-1" / "owner.toml", "an owner config", ValueError)
    return Policy.from_mapping(owner["policy"], "owner.toml [policy]")
