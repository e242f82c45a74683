"""`learner_options` names exactly the learners `learners` builds, without importing them."""

from __future__ import annotations

from modelshare.common.trees.learner_options import AUTO_LEARNER, LEARNER_NAMES, REQUIREMENT_AWARE
from modelshare.common.trees.learners import LEARNERS


def test_the_light_list_of_learner_names_is_the_learners_registry_plus_auto():
    assert LEARNER_NAMES == (*sorted(LEARNERS), AUTO_LEARNER)
    assert REQUIREMENT_AWARE <= set(LEARNERS)
