"""What `modelshare simulate` writes before it starts any process: the study file per mechanism."""

from __future__ import annotations

from common.federation.study import load_study_file, spec_requirement
from common.federation.wire import disclosure_from_pb
from common.mechanisms import registry
from modelshare.cli import build_parser
from modelshare.simulate import prepare


def _prepare(tmp_path, *flags):
    args = build_parser().parse_args(["simulate", "--dataset", "car", "--owners", "2", *flags])
    prepare(args, tmp_path)
    return load_study_file(tmp_path / "study.toml").spec


def test_kanon_rdt_studies_get_the_dps_default_counts_disclosure_and_a_depth(tmp_path):
    spec = _prepare(tmp_path, "--mechanism", "kanon-rdt")
    assert spec.mechanism == "kanon-rdt" and str(spec_requirement(spec)) == registry.get("kanon-rdt").default_requirement
    assert spec.max_depth == registry.get("kanon-rdt").default_max_depth
    assert disclosure_from_pb(spec.disclosure, where="study") == "counts"


def test_apt_studies_keep_the_papers_default_requirement(tmp_path):
    spec = _prepare(tmp_path)
    assert spec.mechanism == "apt" and str(spec_requirement(spec)) == "cl-diversity:c=5,l=2"
