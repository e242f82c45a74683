"""Bundled benchmark tables and the loader for user tables.

`load_dataset` reads one of the UCI tables shipped with the package (see `DATASETS` and the
``NOTICE`` file); `load_table` reads any CSV, TSV or Parquet file. Both apply the same
missing-value policy (documented in `modelshare.common.data.datasets.loading`) and return a `LoadedTable` whose
frame fits its schema.
"""

from modelshare.common.data.datasets.bundled import (
    DATASETS,
    DatasetInfo,
    UnknownDatasetError,
    bundled_schema,
    describe_dataset,
    export_dataset,
    list_datasets,
    load_dataset,
)
from modelshare.common.data.datasets.loading import LoadedTable, MissingPolicy, load_table, read_frame

__all__ = [
    "DATASETS",
    "DatasetInfo",
    "LoadedTable",
    "MissingPolicy",
    "UnknownDatasetError",
    "bundled_schema",
    "describe_dataset",
    "export_dataset",
    "list_datasets",
    "load_dataset",
    "load_table",
    "read_frame",
]
