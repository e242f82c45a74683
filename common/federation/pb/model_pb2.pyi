from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Disclosure(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DISCLOSURE_UNSPECIFIED: _ClassVar[Disclosure]
    DISCLOSURE_COUNTS: _ClassVar[Disclosure]
    DISCLOSURE_HIT_MISS: _ClassVar[Disclosure]
DISCLOSURE_UNSPECIFIED: Disclosure
DISCLOSURE_COUNTS: Disclosure
DISCLOSURE_HIT_MISS: Disclosure

class Schema(_message.Message):
    __slots__ = ("class_name", "classes", "attributes", "target", "data_derived")
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    DATA_DERIVED_FIELD_NUMBER: _ClassVar[int]
    class_name: str
    classes: _containers.RepeatedScalarFieldContainer[str]
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    target: Attribute
    data_derived: bool
    def __init__(self, class_name: _Optional[str] = ..., classes: _Optional[_Iterable[str]] = ..., attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ..., target: _Optional[_Union[Attribute, _Mapping]] = ..., data_derived: _Optional[bool] = ...) -> None: ...

class Attribute(_message.Message):
    __slots__ = ("name", "categorical", "numeric")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CATEGORICAL_FIELD_NUMBER: _ClassVar[int]
    NUMERIC_FIELD_NUMBER: _ClassVar[int]
    name: str
    categorical: CategoricalDomain
    numeric: NumericDomain
    def __init__(self, name: _Optional[str] = ..., categorical: _Optional[_Union[CategoricalDomain, _Mapping]] = ..., numeric: _Optional[_Union[NumericDomain, _Mapping]] = ...) -> None: ...

class CategoricalDomain(_message.Message):
    __slots__ = ("categories",)
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    categories: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, categories: _Optional[_Iterable[str]] = ...) -> None: ...

class NumericDomain(_message.Message):
    __slots__ = ("low", "high", "integer")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    INTEGER_FIELD_NUMBER: _ClassVar[int]
    low: float
    high: float
    integer: bool
    def __init__(self, low: _Optional[float] = ..., high: _Optional[float] = ..., integer: _Optional[bool] = ...) -> None: ...

class Constraint(_message.Message):
    __slots__ = ("categories", "interval")
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    categories: CategorySet
    interval: Interval
    def __init__(self, categories: _Optional[_Union[CategorySet, _Mapping]] = ..., interval: _Optional[_Union[Interval, _Mapping]] = ...) -> None: ...

class CategorySet(_message.Message):
    __slots__ = ("codes",)
    CODES_FIELD_NUMBER: _ClassVar[int]
    codes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, codes: _Optional[_Iterable[int]] = ...) -> None: ...

class Interval(_message.Message):
    __slots__ = ("low", "high", "low_closed", "high_closed")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    LOW_CLOSED_FIELD_NUMBER: _ClassVar[int]
    HIGH_CLOSED_FIELD_NUMBER: _ClassVar[int]
    low: float
    high: float
    low_closed: bool
    high_closed: bool
    def __init__(self, low: _Optional[float] = ..., high: _Optional[float] = ..., low_closed: _Optional[bool] = ..., high_closed: _Optional[bool] = ...) -> None: ...

class Edge(_message.Message):
    __slots__ = ("constraint", "child")
    CONSTRAINT_FIELD_NUMBER: _ClassVar[int]
    CHILD_FIELD_NUMBER: _ClassVar[int]
    constraint: Constraint
    child: int
    def __init__(self, constraint: _Optional[_Union[Constraint, _Mapping]] = ..., child: _Optional[int] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("label", "hit", "miss", "counts", "attribute", "edges")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    HIT_FIELD_NUMBER: _ClassVar[int]
    MISS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTE_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    label: int
    hit: float
    miss: float
    counts: _containers.RepeatedScalarFieldContainer[float]
    attribute: int
    edges: _containers.RepeatedCompositeFieldContainer[Edge]
    def __init__(self, label: _Optional[int] = ..., hit: _Optional[float] = ..., miss: _Optional[float] = ..., counts: _Optional[_Iterable[float]] = ..., attribute: _Optional[int] = ..., edges: _Optional[_Iterable[_Union[Edge, _Mapping]]] = ...) -> None: ...

class Tree(_message.Message):
    __slots__ = ("disclosure", "nodes")
    DISCLOSURE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    disclosure: Disclosure
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, disclosure: _Optional[_Union[Disclosure, str]] = ..., nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class RegressionNode(_message.Message):
    __slots__ = ("count", "total", "attribute", "edges")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTE_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    count: float
    total: float
    attribute: int
    edges: _containers.RepeatedCompositeFieldContainer[Edge]
    def __init__(self, count: _Optional[float] = ..., total: _Optional[float] = ..., attribute: _Optional[int] = ..., edges: _Optional[_Iterable[_Union[Edge, _Mapping]]] = ...) -> None: ...

class RegressionTree(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[RegressionNode]
    def __init__(self, nodes: _Optional[_Iterable[_Union[RegressionNode, _Mapping]]] = ...) -> None: ...

class PathClaim(_message.Message):
    __slots__ = ("leaf", "tuples", "requirement", "tree")
    LEAF_FIELD_NUMBER: _ClassVar[int]
    TUPLES_FIELD_NUMBER: _ClassVar[int]
    REQUIREMENT_FIELD_NUMBER: _ClassVar[int]
    TREE_FIELD_NUMBER: _ClassVar[int]
    leaf: int
    tuples: float
    requirement: str
    tree: int
    def __init__(self, leaf: _Optional[int] = ..., tuples: _Optional[float] = ..., requirement: _Optional[str] = ..., tree: _Optional[int] = ...) -> None: ...

class AttackCounts(_message.Message):
    __slots__ = ("leaves", "users")
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    leaves: int
    users: float
    def __init__(self, leaves: _Optional[int] = ..., users: _Optional[float] = ...) -> None: ...

class AttackReport(_message.Message):
    __slots__ = ("uniqueness", "homogeneity", "background")
    UNIQUENESS_FIELD_NUMBER: _ClassVar[int]
    HOMOGENEITY_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    uniqueness: AttackCounts
    homogeneity: AttackCounts
    background: _containers.RepeatedCompositeFieldContainer[AttackCounts]
    def __init__(self, uniqueness: _Optional[_Union[AttackCounts, _Mapping]] = ..., homogeneity: _Optional[_Union[AttackCounts, _Mapping]] = ..., background: _Optional[_Iterable[_Union[AttackCounts, _Mapping]]] = ...) -> None: ...

class PrivacyReport(_message.Message):
    __slots__ = ("mechanism", "parameters", "guarantee", "requirement", "claims", "attacks")
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    GUARANTEE_FIELD_NUMBER: _ClassVar[int]
    REQUIREMENT_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    ATTACKS_FIELD_NUMBER: _ClassVar[int]
    mechanism: str
    parameters: _struct_pb2.Struct
    guarantee: str
    requirement: str
    claims: _containers.RepeatedCompositeFieldContainer[PathClaim]
    attacks: AttackReport
    def __init__(self, mechanism: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., guarantee: _Optional[str] = ..., requirement: _Optional[str] = ..., claims: _Optional[_Iterable[_Union[PathClaim, _Mapping]]] = ..., attacks: _Optional[_Union[AttackReport, _Mapping]] = ...) -> None: ...
