"""BASIS is set as the pseudo-data models are: `simulate`'s comparison, its printout, `--json` and report page.

The owners' real submissions of a table `simulate` dealt are mined by the miner's own code in process, and
`simulate.compare` then fits BASIS on the pooled raw training rows: every model gets the study's setting on
both sides (the same given values, the same fixed rule, the same grid for ``auto``), and BASIS's ``auto``
never reads the held-out rows.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from modelshare import simulate
from modelshare.cli import build_parser
from modelshare.cli.common import out
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.serde import parameter_from_pb, study_to_pb
from modelshare.common.federation.wire import decode_model
from modelshare.miner_node.global_models import GRIDS
from modelshare.miner_node.mining import AcceptedModel, Evaluation, mine
from modelshare.owner_node.training import build_submission
from modelshare.report_html import study_report, write_report

SHARES = "|".join(re.escape(f"{g['min_samples_leaf']:g}") for g in GRIDS["decision-tree"])
AUTO_ON_RAW = (rf"auto: min_samples_leaf=({SHARES}) by 3-fold CV on [\d,]+ raw rows, "
               r"folds by rows \(accuracy 0\.\d{4}\)")


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """Car dealt to three owners by `simulate.prepare` (decision tree by default ``auto``, naive Bayes given,
    gradient boosting ``fixed``), each owner's real submission, and the study the miner mines from them."""
    args = build_parser().parse_args(["simulate", "--dataset", "car", "--owners", "3", "--mechanism", "none",
                                      "--global-models", "decision-tree", "naive-bayes", "gradient-boosting",
                                      "--model-setting", "naive-bayes:alpha=0.5",
                                      "--model-setting", "gradient-boosting=fixed"])
    schema, data = simulate.prepare(args, tmp_path_factory.mktemp("simulate"))
    study, key = data["study"], Ed25519PrivateKey.generate()
    accepted = []
    for i in range(args.owners):
        rows = data["parts"] == i
        envelope = build_submission(study, data["X_train"][rows], data["y_train"][rows], owner_id=f"owner-{i + 1}",
                                    key=key)
        accepted.append(AcceptedModel(f"owner-{i + 1}", decode_model(fpb.ModelMessage.FromString(envelope.payload))))
    evaluation = Evaluation(data["X_test"], data["y_test"], np.arange(data["y_test"].shape[0]))
    return schema, data, args, mine(study, accepted, evaluation)


def test_basis_and_the_miners_models_get_the_same_setting(simulated):
    schema, data, args, results = simulated
    rows = {row["model"]: row for row in simulate.compare(schema, data, results, args)}
    tree, bayes, boosting = rows["decision-tree"], rows["naive-bayes"], rows["gradient-boosting"]
    assert re.fullmatch(r"auto: min_samples_leaf=\S+ by 3-fold CV on [\d,]+ pseudo rows, folds by released trees .*",
                        tree["selection"])
    assert re.fullmatch(AUTO_ON_RAW, tree["basis_selection"]), "the same grid, on the raw training rows"
    assert tree["basis_parameters"]["min_samples_leaf"] >= 1, "a share of the raw rows, in rows"
    assert bayes["selection"] == bayes["basis_selection"] == "given"
    assert bayes["parameters"] == bayes["basis_parameters"] == {"alpha": 0.5}
    assert boosting["selection"] == boosting["basis_selection"] == "fixed"
    assert boosting["parameters"] == boosting["basis_parameters"] == {}
    mined = {m.name: m for m in results.models}
    assert {k: parameter_from_pb(v) for k, v in mined["naive-bayes"].parameters.items()} == {"alpha": 0.5}


def test_basis_auto_never_reads_the_held_out_rows(simulated):
    """Held-out rows with every class changed, or fewer of them, leave BASIS's choice and model as they were."""
    schema, data, _, _ = simulated
    first, choice = simulate.fitted_basis("decision-tree", schema, data)
    flipped = {**data, "y_test": (data["y_test"] + 1) % schema.n_classes, "X_test": data["X_test"][::-1]}
    fewer = {**data, "X_test": data["X_test"][:10], "y_test": data["y_test"][:10]}
    for other in (flipped, fewer):
        model, again = simulate.fitted_basis("decision-tree", schema, other)
        assert again == choice
        assert np.array_equal(model.predict(data["X_train"]), first.predict(data["X_train"]))
    assert re.fullmatch(AUTO_ON_RAW, choice.selection)


def test_the_printout_and_the_report_say_how_basis_was_set(simulated, tmp_path: Path):
    schema, data, args, results = simulated
    models = simulate.compare(schema, data, results, args)
    report = {"source": "car.csv", "task": "classification", "mechanism": "none", "hints": [], "refusals": [],
              "requirement": None, "disclosure": "counts", "owners": [], "models": models,
              "test_rows": len(data["y_test"]), "off_path": "", "wall_seconds": 1.0}
    with out.capture() as captured:
        simulate._print(report)
    printed = " ".join(captured.get().split())
    tree = models[0]
    assert f"decision-tree BASIS hyperparameters: {tree['basis_selection']}" in printed
    assert "naive-bayes BASIS hyperparameters: given: alpha=0.5" in printed
    assert "gradient-boosting BASIS hyperparameters: fixed" in printed
    status = fpb.StudyStatus(spec=study_to_pb(data["study"]), state="done")
    page = write_report(study_report(status, results, made_by="modelshare simulate", basis=models), tmp_path)
    text = " ".join(re.sub(r"<[^>]+>", " ", page.read_text()).split())
    assert "BASIS hyperparameters" in text and tree["basis_selection"] in text and "given: alpha=0.5" in text
