"""A study, decoded and checked once: `Study`, its owners' `Training`, and the global models' settings.

This layer sits above the mechanisms and the audit and below the federation: it knows what a study
asks for, not how it travels (`modelshare.common.federation.serde` is its wire form,
`modelshare.common.federation.study` its ``study.toml``).
"""

from modelshare.common.study.settings import (
    AUTO,
    FIXED,
    GIVEN,
    MODEL_PARAMETERS,
    MODES,
    WITHOUT_SETTINGS,
    ModelPlan,
    ModelSetting,
    ParameterValue,
    check_settings,
    settings_from_mapping,
)
from modelshare.common.study.study import (
    CLASS_ASSIGNMENTS,
    LEARNERS,
    MAX_TREES,
    OFF_PATH_MODES,
    ON_PATH_MODES,
    STUDY_ID,
    Study,
    StudyError,
    Training,
)

__all__ = ["AUTO", "CLASS_ASSIGNMENTS", "FIXED", "GIVEN", "LEARNERS", "MAX_TREES", "MODEL_PARAMETERS", "MODES",
           "OFF_PATH_MODES", "ON_PATH_MODES", "STUDY_ID", "WITHOUT_SETTINGS", "ModelPlan", "ModelSetting",
           "ParameterValue", "Study", "StudyError", "Training", "check_settings", "settings_from_mapping"]
