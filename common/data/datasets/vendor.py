"""Regenerate the bundled tables in ``data/`` from the shared UCI copies (audit aid, not run time).

Usage::

    python -m common.data.datasets.vendor /path/to/shared/datasets [--out common/data/datasets/data]

Every table is written as gzip-compressed CSV with a header row (``NAME.csv.gz``, fixed gzip
timestamp so reruns are byte-identical) and its schema as ``NAME.schema.json``. Field text is
copied as found, except that whitespace around fields is removed, the trailing ``.`` of the
Adult test labels is dropped and the Wine ``color`` column is added; ``?`` tokens stay in place
because missing-value handling belongs to the loader. Category orders come from the UCI
``.names`` descriptions; the script fails if the data holds a value the declared order lacks.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

import pandas as pd

from common.data.schema import Attribute, CategoricalAttribute, NumericAttribute, Schema

__all__ = ["main", "build_all"]

NURSERY_ORDER = {
    "parents": ("usual", "pretentious", "great_pret"),
    "has_nurs": ("proper", "less_proper", "improper", "critical", "very_crit"),
    "form": ("complete", "completed", "incomplete", "foster"),
    "children": ("1", "2", "3", "more"),
    "housing": ("convenient", "less_conv", "critical"),
    "finance": ("convenient", "inconv"),
    "social": ("nonprob", "slightly_prob", "problematic"),
    "health": ("recommended", "priority", "not_recom"),
}
NURSERY_CLASSES = ("not_recom", "recommend", "very_recom", "priority", "spec_prior")

# car.names order; its spellings "v-high", "5-more", "v-good" appear in car.data as below.
CAR_ORDER = {
    "buying": ("vhigh", "high", "med", "low"),
    "maint": ("vhigh", "high", "med", "low"),
    "doors": ("2", "3", "4", "5more"),
    "persons": ("2", "4", "more"),
    "lug_boot": ("small", "med", "big"),
    "safety": ("low", "med", "high"),
}
CAR_CLASSES = ("unacc", "acc", "good", "vgood")

ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
)  # fmt: skip
ADULT_NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")

VOTE_COLUMNS = (
    "handicapped-infants", "water-project-cost-sharing", "adoption-of-the-budget-resolution",
    "physician-fee-freeze", "el-salvador-aid", "religious-groups-in-schools",
    "anti-satellite-test-ban", "aid-to-nicaraguan-contras", "mx-missile", "immigration",
    "synfuels-corporation-cutback", "education-spending", "superfund-right-to-sue", "crime",
    "duty-free-exports", "export-administration-act-south-africa",
)  # fmt: skip


def _read(path: Path, names: Sequence[str] | None, *, sep: str = ",", skiprows: int = 0) -> pd.DataFrame:
    """Read a raw file as text, fields stripped; ``names=None`` takes the file's own header."""
    frame = pd.read_csv(
        path,
        sep=sep,
        header=None if names is not None else 0,
        names=list(names) if names is not None else None,
        dtype=str,
        keep_default_na=False,
        skipinitialspace=True,
        skiprows=skiprows,
    )
    return frame.apply(lambda col: col.str.strip())


def _numeric(frame: pd.DataFrame, name: str) -> NumericAttribute:
    values = pd.to_numeric(frame[name])
    return NumericAttribute(name, float(values.min()), float(values.max()))


def _observed(frame: pd.DataFrame, name: str) -> CategoricalAttribute:
    """Categories sorted, the missing token ``?`` excluded."""
    values = frame[name]
    return CategoricalAttribute(name, tuple(sorted(values[values != "?"].unique())))


def _ordered(order: dict[str, tuple[str, ...]]) -> tuple[Attribute, ...]:
    return tuple(CategoricalAttribute(name, cats) for name, cats in order.items())


def nursery(src: Path) -> tuple[pd.DataFrame, Schema]:
    frame = _read(src / "nursery" / "nursery.data", [*NURSERY_ORDER, "class"])
    return frame, Schema(_ordered(NURSERY_ORDER), "class", NURSERY_CLASSES)


def car(src: Path) -> tuple[pd.DataFrame, Schema]:
    frame = _read(src / "car" / "car.data", [*CAR_ORDER, "class"])
    return frame, Schema(_ordered(CAR_ORDER), "class", CAR_CLASSES)


def adult(src: Path) -> tuple[pd.DataFrame, Schema]:
    names = [*ADULT_COLUMNS, "income"]
    train = _read(src / "adult" / "adult.data", names)
    test = _read(src / "adult" / "adult.test", names, skiprows=1)
    test["income"] = test["income"].str.removesuffix(".")
    frame = pd.concat([train, test], ignore_index=True)
    attributes = tuple(
        _numeric(frame, name) if name in ADULT_NUMERIC else _observed(frame, name) for name in ADULT_COLUMNS
    )
    return frame, Schema(attributes, "income", ("<=50K", ">50K"))


def vote(src: Path) -> tuple[pd.DataFrame, Schema]:
    frame = _read(src / "vote" / "house-votes-84.data", ["party", *VOTE_COLUMNS])
    attributes = tuple(CategoricalAttribute(name, ("n", "y")) for name in VOTE_COLUMNS)
    return frame, Schema(attributes, "party", ("democrat", "republican"))


def winequality(src: Path) -> tuple[pd.DataFrame, Schema]:
    parts = [
        _read(src / "winequality" / f"winequality-{color}.csv", None, sep=";").assign(color=color)
        for color in ("red", "white")
    ]
    frame = pd.concat(parts, ignore_index=True)
    chemistry = [c for c in frame.columns if c not in ("color", "quality")]
    frame = frame[["color", *chemistry, "quality"]]
    attributes = (CategoricalAttribute("color", ("red", "white")), *(_numeric(frame, c) for c in chemistry))
    return frame, Schema(attributes, "quality", tuple(str(q) for q in range(3, 10)))


BUILDERS = {"nursery": nursery, "car": car, "adult": adult, "vote": vote, "winequality": winequality}


def build_all(src: Path, out: Path) -> None:
    """Write every bundled table and schema to ``out``, checking each table against its schema."""
    out.mkdir(parents=True, exist_ok=True)
    for name, build in BUILDERS.items():
        frame, schema = build(src)
        frame = frame[[*schema.names, schema.class_name]]
        complete = frame[~frame.eq("?").any(axis=1)]
        schema.encode(complete, source=name)  # raises SchemaError on a value outside the declared domain
        frame.to_csv(
            out / f"{name}.csv.gz",
            index=False,
            lineterminator="\n",
            compression={"method": "gzip", "compresslevel": 9, "mtime": 0},
        )
        schema.save(out / f"{name}.schema.json")
        print(f"{name}: {len(frame)} rows, {len(frame) - len(complete)} with '?'")


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry: ``vendor.py SRC [--out DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="folder holding the shared UCI copies (see its MANIFEST.md)")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("data"), help="output folder")
    args = parser.parse_args(argv)
    build_all(args.src, args.out)


if __name__ == "__main__":
    main()
