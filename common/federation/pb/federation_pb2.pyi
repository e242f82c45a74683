import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from modelshare.common.federation.pb import model_pb2 as _model_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RefusalCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REFUSAL_CODE_UNSPECIFIED: _ClassVar[RefusalCode]
    REFUSAL_CODE_POLICY: _ClassVar[RefusalCode]
    REFUSAL_CODE_BAD_STUDY: _ClassVar[RefusalCode]
    REFUSAL_CODE_BUDGET: _ClassVar[RefusalCode]
    REFUSAL_CODE_BAD_LOCAL_DATA: _ClassVar[RefusalCode]
    REFUSAL_CODE_UNSATISFIABLE: _ClassVar[RefusalCode]
    REFUSAL_CODE_EMPTY_RELEASE: _ClassVar[RefusalCode]
    REFUSAL_CODE_INTERNAL: _ClassVar[RefusalCode]
    REFUSAL_CODE_TOO_LARGE: _ClassVar[RefusalCode]
    REFUSAL_CODE_FAILED_AUDIT: _ClassVar[RefusalCode]
    REFUSAL_CODE_DATA_UNAVAILABLE: _ClassVar[RefusalCode]
REFUSAL_CODE_UNSPECIFIED: RefusalCode
REFUSAL_CODE_POLICY: RefusalCode
REFUSAL_CODE_BAD_STUDY: RefusalCode
REFUSAL_CODE_BUDGET: RefusalCode
REFUSAL_CODE_BAD_LOCAL_DATA: RefusalCode
REFUSAL_CODE_UNSATISFIABLE: RefusalCode
REFUSAL_CODE_EMPTY_RELEASE: RefusalCode
REFUSAL_CODE_INTERNAL: RefusalCode
REFUSAL_CODE_TOO_LARGE: RefusalCode
REFUSAL_CODE_FAILED_AUDIT: RefusalCode
REFUSAL_CODE_DATA_UNAVAILABLE: RefusalCode

class ModelMessage(_message.Message):
    __slots__ = ("study_id", "owner_id", "schema_fingerprint", "nonce", "timestamp", "schema", "trees", "report", "regression_trees")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TREES_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    REGRESSION_TREES_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    owner_id: str
    schema_fingerprint: str
    nonce: bytes
    timestamp: _timestamp_pb2.Timestamp
    schema: _model_pb2.Schema
    trees: _containers.RepeatedCompositeFieldContainer[_model_pb2.Tree]
    report: _model_pb2.PrivacyReport
    regression_trees: _containers.RepeatedCompositeFieldContainer[_model_pb2.RegressionTree]
    def __init__(self, study_id: _Optional[str] = ..., owner_id: _Optional[str] = ..., schema_fingerprint: _Optional[str] = ..., nonce: _Optional[bytes] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., schema: _Optional[_Union[_model_pb2.Schema, _Mapping]] = ..., trees: _Optional[_Iterable[_Union[_model_pb2.Tree, _Mapping]]] = ..., report: _Optional[_Union[_model_pb2.PrivacyReport, _Mapping]] = ..., regression_trees: _Optional[_Iterable[_Union[_model_pb2.RegressionTree, _Mapping]]] = ...) -> None: ...

class OwnerRefusal(_message.Message):
    __slots__ = ("study_id", "owner_id", "reason", "nonce", "timestamp", "code")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    owner_id: str
    reason: str
    nonce: bytes
    timestamp: _timestamp_pb2.Timestamp
    code: RefusalCode
    def __init__(self, study_id: _Optional[str] = ..., owner_id: _Optional[str] = ..., reason: _Optional[str] = ..., nonce: _Optional[bytes] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., code: _Optional[_Union[RefusalCode, str]] = ...) -> None: ...

class SignedEnvelope(_message.Message):
    __slots__ = ("payload", "signer_key_id", "signature")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SIGNER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    signer_key_id: str
    signature: bytes
    def __init__(self, payload: _Optional[bytes] = ..., signer_key_id: _Optional[str] = ..., signature: _Optional[bytes] = ...) -> None: ...

class StudySpec(_message.Message):
    __slots__ = ("study_id", "title", "schema", "schema_fingerprint", "mechanism", "requirement", "disclosure", "learner", "max_depth", "min_samples_leaf", "global_models", "pgen_scale", "class_assignment", "quorum", "deadline", "owners", "seed", "max_message_bytes", "global_model_settings", "pgen_off_path", "pairing", "category_split", "confidence", "unpruned", "pgen_on_path", "prior_share")
    class GlobalModelSettingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: GlobalModelSetting
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[GlobalModelSetting, _Mapping]] = ...) -> None: ...
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    REQUIREMENT_FIELD_NUMBER: _ClassVar[int]
    DISCLOSURE_FIELD_NUMBER: _ClassVar[int]
    LEARNER_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MIN_SAMPLES_LEAF_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_MODELS_FIELD_NUMBER: _ClassVar[int]
    PGEN_SCALE_FIELD_NUMBER: _ClassVar[int]
    CLASS_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_MODEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    PGEN_OFF_PATH_FIELD_NUMBER: _ClassVar[int]
    PAIRING_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_SPLIT_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    UNPRUNED_FIELD_NUMBER: _ClassVar[int]
    PGEN_ON_PATH_FIELD_NUMBER: _ClassVar[int]
    PRIOR_SHARE_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    title: str
    schema: _model_pb2.Schema
    schema_fingerprint: str
    mechanism: str
    requirement: str
    disclosure: _model_pb2.Disclosure
    learner: str
    max_depth: int
    min_samples_leaf: int
    global_models: _containers.RepeatedScalarFieldContainer[str]
    pgen_scale: float
    class_assignment: str
    quorum: int
    deadline: _timestamp_pb2.Timestamp
    owners: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    max_message_bytes: int
    global_model_settings: _containers.MessageMap[str, GlobalModelSetting]
    pgen_off_path: str
    pairing: str
    category_split: str
    confidence: float
    unpruned: bool
    pgen_on_path: str
    prior_share: float
    def __init__(self, study_id: _Optional[str] = ..., title: _Optional[str] = ..., schema: _Optional[_Union[_model_pb2.Schema, _Mapping]] = ..., schema_fingerprint: _Optional[str] = ..., mechanism: _Optional[str] = ..., requirement: _Optional[str] = ..., disclosure: _Optional[_Union[_model_pb2.Disclosure, str]] = ..., learner: _Optional[str] = ..., max_depth: _Optional[int] = ..., min_samples_leaf: _Optional[int] = ..., global_models: _Optional[_Iterable[str]] = ..., pgen_scale: _Optional[float] = ..., class_assignment: _Optional[str] = ..., quorum: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., owners: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., global_model_settings: _Optional[_Mapping[str, GlobalModelSetting]] = ..., pgen_off_path: _Optional[str] = ..., pairing: _Optional[str] = ..., category_split: _Optional[str] = ..., confidence: _Optional[float] = ..., unpruned: _Optional[bool] = ..., pgen_on_path: _Optional[str] = ..., prior_share: _Optional[float] = ...) -> None: ...

class ModelParameter(_message.Message):
    __slots__ = ("int_value", "float_value", "string_value", "bool_value")
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    int_value: int
    float_value: float
    string_value: str
    bool_value: bool
    def __init__(self, int_value: _Optional[int] = ..., float_value: _Optional[float] = ..., string_value: _Optional[str] = ..., bool_value: _Optional[bool] = ...) -> None: ...

class GlobalModelSetting(_message.Message):
    __slots__ = ("mode", "parameters")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ModelParameter
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ModelParameter, _Mapping]] = ...) -> None: ...
    MODE_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    mode: str
    parameters: _containers.MessageMap[str, ModelParameter]
    def __init__(self, mode: _Optional[str] = ..., parameters: _Optional[_Mapping[str, ModelParameter]] = ...) -> None: ...

class CreateStudyRequest(_message.Message):
    __slots__ = ("spec", "evaluation_csv")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_CSV_FIELD_NUMBER: _ClassVar[int]
    spec: StudySpec
    evaluation_csv: bytes
    def __init__(self, spec: _Optional[_Union[StudySpec, _Mapping]] = ..., evaluation_csv: _Optional[bytes] = ...) -> None: ...

class StudyRef(_message.Message):
    __slots__ = ("study_id",)
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    def __init__(self, study_id: _Optional[str] = ...) -> None: ...

class ListStudiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PollRequest(_message.Message):
    __slots__ = ("wait_seconds", "version", "health")
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    wait_seconds: int
    version: str
    health: str
    def __init__(self, wait_seconds: _Optional[int] = ..., version: _Optional[str] = ..., health: _Optional[str] = ...) -> None: ...

class StudyAnnouncement(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: StudySpec
    def __init__(self, spec: _Optional[_Union[StudySpec, _Mapping]] = ...) -> None: ...

class PollReply(_message.Message):
    __slots__ = ("studies",)
    STUDIES_FIELD_NUMBER: _ClassVar[int]
    studies: _containers.RepeatedCompositeFieldContainer[StudyAnnouncement]
    def __init__(self, studies: _Optional[_Iterable[_Union[StudyAnnouncement, _Mapping]]] = ...) -> None: ...

class SubmitAck(_message.Message):
    __slots__ = ("study_id", "owner_id", "submission_id", "accepted_at", "duplicate")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_AT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    owner_id: str
    submission_id: str
    accepted_at: _timestamp_pb2.Timestamp
    duplicate: bool
    def __init__(self, study_id: _Optional[str] = ..., owner_id: _Optional[str] = ..., submission_id: _Optional[str] = ..., accepted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class OwnerState(_message.Message):
    __slots__ = ("owner_id", "state", "reason", "updated_at")
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    owner_id: str
    state: str
    reason: str
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, owner_id: _Optional[str] = ..., state: _Optional[str] = ..., reason: _Optional[str] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class StudyStatus(_message.Message):
    __slots__ = ("spec", "state", "reason", "owners", "created_at", "updated_at")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    spec: StudySpec
    state: str
    reason: str
    owners: _containers.RepeatedCompositeFieldContainer[OwnerState]
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, spec: _Optional[_Union[StudySpec, _Mapping]] = ..., state: _Optional[str] = ..., reason: _Optional[str] = ..., owners: _Optional[_Iterable[_Union[OwnerState, _Mapping]]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class StudyList(_message.Message):
    __slots__ = ("studies",)
    STUDIES_FIELD_NUMBER: _ClassVar[int]
    studies: _containers.RepeatedCompositeFieldContainer[StudyStatus]
    def __init__(self, studies: _Optional[_Iterable[_Union[StudyStatus, _Mapping]]] = ...) -> None: ...

class OwnerResult(_message.Message):
    __slots__ = ("owner_id", "tuples", "leaves", "claim", "audit_passed", "pseudo_rows", "trees", "regression_trees", "learner")
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    TUPLES_FIELD_NUMBER: _ClassVar[int]
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    AUDIT_PASSED_FIELD_NUMBER: _ClassVar[int]
    PSEUDO_ROWS_FIELD_NUMBER: _ClassVar[int]
    TREES_FIELD_NUMBER: _ClassVar[int]
    REGRESSION_TREES_FIELD_NUMBER: _ClassVar[int]
    LEARNER_FIELD_NUMBER: _ClassVar[int]
    owner_id: str
    tuples: float
    leaves: int
    claim: str
    audit_passed: bool
    pseudo_rows: int
    trees: _containers.RepeatedCompositeFieldContainer[_model_pb2.Tree]
    regression_trees: _containers.RepeatedCompositeFieldContainer[_model_pb2.RegressionTree]
    learner: str
    def __init__(self, owner_id: _Optional[str] = ..., tuples: _Optional[float] = ..., leaves: _Optional[int] = ..., claim: _Optional[str] = ..., audit_passed: _Optional[bool] = ..., pseudo_rows: _Optional[int] = ..., trees: _Optional[_Iterable[_Union[_model_pb2.Tree, _Mapping]]] = ..., regression_trees: _Optional[_Iterable[_Union[_model_pb2.RegressionTree, _Mapping]]] = ..., learner: _Optional[str] = ...) -> None: ...

class GlobalModelResult(_message.Message):
    __slots__ = ("name", "train_rows", "accuracy", "predictions", "tree", "rmse", "mae", "values", "auc", "parameters", "selection")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ModelParameter
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ModelParameter, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ROWS_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    TREE_FIELD_NUMBER: _ClassVar[int]
    RMSE_FIELD_NUMBER: _ClassVar[int]
    MAE_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    AUC_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    train_rows: int
    accuracy: float
    predictions: _containers.RepeatedScalarFieldContainer[int]
    tree: _model_pb2.Tree
    rmse: float
    mae: float
    values: _containers.RepeatedScalarFieldContainer[float]
    auc: float
    parameters: _containers.MessageMap[str, ModelParameter]
    selection: str
    def __init__(self, name: _Optional[str] = ..., train_rows: _Optional[int] = ..., accuracy: _Optional[float] = ..., predictions: _Optional[_Iterable[int]] = ..., tree: _Optional[_Union[_model_pb2.Tree, _Mapping]] = ..., rmse: _Optional[float] = ..., mae: _Optional[float] = ..., values: _Optional[_Iterable[float]] = ..., auc: _Optional[float] = ..., parameters: _Optional[_Mapping[str, ModelParameter]] = ..., selection: _Optional[str] = ...) -> None: ...

class StudyResults(_message.Message):
    __slots__ = ("study_id", "owners", "models", "evaluation_rows", "mining_seconds", "evaluation_row", "evaluation_class", "evaluation_value", "evaluation_rows_dropped", "engine", "pseudo_data", "pgen_off_path", "pgen_on_path", "reader")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ROWS_FIELD_NUMBER: _ClassVar[int]
    MINING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ROW_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_CLASS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_VALUE_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_ROWS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    PSEUDO_DATA_FIELD_NUMBER: _ClassVar[int]
    PGEN_OFF_PATH_FIELD_NUMBER: _ClassVar[int]
    PGEN_ON_PATH_FIELD_NUMBER: _ClassVar[int]
    READER_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    owners: _containers.RepeatedCompositeFieldContainer[OwnerResult]
    models: _containers.RepeatedCompositeFieldContainer[GlobalModelResult]
    evaluation_rows: int
    mining_seconds: float
    evaluation_row: _containers.RepeatedScalarFieldContainer[int]
    evaluation_class: _containers.RepeatedScalarFieldContainer[int]
    evaluation_value: _containers.RepeatedScalarFieldContainer[float]
    evaluation_rows_dropped: int
    engine: str
    pseudo_data: str
    pgen_off_path: str
    pgen_on_path: str
    reader: StudyReader
    def __init__(self, study_id: _Optional[str] = ..., owners: _Optional[_Iterable[_Union[OwnerResult, _Mapping]]] = ..., models: _Optional[_Iterable[_Union[GlobalModelResult, _Mapping]]] = ..., evaluation_rows: _Optional[int] = ..., mining_seconds: _Optional[float] = ..., evaluation_row: _Optional[_Iterable[int]] = ..., evaluation_class: _Optional[_Iterable[int]] = ..., evaluation_value: _Optional[_Iterable[float]] = ..., evaluation_rows_dropped: _Optional[int] = ..., engine: _Optional[str] = ..., pseudo_data: _Optional[str] = ..., pgen_off_path: _Optional[str] = ..., pgen_on_path: _Optional[str] = ..., reader: _Optional[_Union[StudyReader, _Mapping]] = ...) -> None: ...

class StudyReader(_message.Message):
    __slots__ = ("summary", "trees", "cap", "largest_belief", "confident_share", "smallest_group", "owners", "skipped")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TREES_FIELD_NUMBER: _ClassVar[int]
    CAP_FIELD_NUMBER: _ClassVar[int]
    LARGEST_BELIEF_FIELD_NUMBER: _ClassVar[int]
    CONFIDENT_SHARE_FIELD_NUMBER: _ClassVar[int]
    SMALLEST_GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    summary: str
    trees: int
    cap: float
    largest_belief: float
    confident_share: float
    smallest_group: float
    owners: _containers.RepeatedCompositeFieldContainer[OwnerReader]
    skipped: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, summary: _Optional[str] = ..., trees: _Optional[int] = ..., cap: _Optional[float] = ..., largest_belief: _Optional[float] = ..., confident_share: _Optional[float] = ..., smallest_group: _Optional[float] = ..., owners: _Optional[_Iterable[_Union[OwnerReader, _Mapping]]] = ..., skipped: _Optional[_Iterable[str]] = ...) -> None: ...

class OwnerReader(_message.Message):
    __slots__ = ("owner_id", "requirement", "largest_belief", "confident_share", "persons", "leaves_beyond")
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUIREMENT_FIELD_NUMBER: _ClassVar[int]
    LARGEST_BELIEF_FIELD_NUMBER: _ClassVar[int]
    CONFIDENT_SHARE_FIELD_NUMBER: _ClassVar[int]
    PERSONS_FIELD_NUMBER: _ClassVar[int]
    LEAVES_BEYOND_FIELD_NUMBER: _ClassVar[int]
    owner_id: str
    requirement: str
    largest_belief: float
    confident_share: float
    persons: float
    leaves_beyond: int
    def __init__(self, owner_id: _Optional[str] = ..., requirement: _Optional[str] = ..., largest_belief: _Optional[float] = ..., confident_share: _Optional[float] = ..., persons: _Optional[float] = ..., leaves_beyond: _Optional[int] = ...) -> None: ...

class CancelStudyRequest(_message.Message):
    __slots__ = ("study_id", "reason")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    reason: str
    def __init__(self, study_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelReply(_message.Message):
    __slots__ = ("status", "already_cancelled")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ALREADY_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    status: StudyStatus
    already_cancelled: bool
    def __init__(self, status: _Optional[_Union[StudyStatus, _Mapping]] = ..., already_cancelled: _Optional[bool] = ...) -> None: ...

class WatchStudyRequest(_message.Message):
    __slots__ = ("study_id", "seen_state", "seen_answers", "wait_seconds")
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    SEEN_STATE_FIELD_NUMBER: _ClassVar[int]
    SEEN_ANSWERS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    study_id: str
    seen_state: str
    seen_answers: int
    wait_seconds: int
    def __init__(self, study_id: _Optional[str] = ..., seen_state: _Optional[str] = ..., seen_answers: _Optional[int] = ..., wait_seconds: _Optional[int] = ...) -> None: ...

class EnvelopeChunk(_message.Message):
    __slots__ = ("index", "data", "total_bytes", "sha256", "study_id")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    STUDY_ID_FIELD_NUMBER: _ClassVar[int]
    index: int
    data: bytes
    total_bytes: int
    sha256: bytes
    study_id: str
    def __init__(self, index: _Optional[int] = ..., data: _Optional[bytes] = ..., total_bytes: _Optional[int] = ..., sha256: _Optional[bytes] = ..., study_id: _Optional[str] = ...) -> None: ...

class ListSitesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Site(_message.Message):
    __slots__ = ("owner_id", "state", "last_poll_at", "version", "health", "revoked_at")
    OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_POLL_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    owner_id: str
    state: str
    last_poll_at: _timestamp_pb2.Timestamp
    version: str
    health: str
    revoked_at: str
    def __init__(self, owner_id: _Optional[str] = ..., state: _Optional[str] = ..., last_poll_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[str] = ..., health: _Optional[str] = ..., revoked_at: _Optional[str] = ...) -> None: ...

class SiteList(_message.Message):
    __slots__ = ("sites", "silent_after_seconds")
    SITES_FIELD_NUMBER: _ClassVar[int]
    SILENT_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    sites: _containers.RepeatedCompositeFieldContainer[Site]
    silent_after_seconds: int
    def __init__(self, sites: _Optional[_Iterable[_Union[Site, _Mapping]]] = ..., silent_after_seconds: _Optional[int] = ...) -> None: ...

class OpenDashboardRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DashboardLogin(_message.Message):
    __slots__ = ("url", "expires_at")
    URL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    url: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, url: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthReply(_message.Message):
    __slots__ = ("status", "name", "open_studies", "submissions")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPEN_STUDIES_FIELD_NUMBER: _ClassVar[int]
    SUBMISSIONS_FIELD_NUMBER: _ClassVar[int]
    status: str
    name: str
    open_studies: int
    submissions: int
    def __init__(self, status: _Optional[str] = ..., name: _Optional[str] = ..., open_studies: _Optional[int] = ..., submissions: _Optional[int] = ...) -> None: ...
