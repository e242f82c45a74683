"""Regenerate the bundled tables in ``data/`` from the shared UCI copies (audit aid, not run time).

Usage::

    python -m modelshare.common.data.datasets.vendor /path/to/shared/datasets [--out common/data/datasets/data]

Every table is written as gzip-compressed CSV with a header row (``NAME.csv.gz``, fixed gzip
timestamp so reruns are byte-identical) and its schema as ``NAME.schema.json``. Field text is
copied as found, except that whitespace around fields is removed, the trailing ``.`` of the
Adult test labels is dropped and the Wine ``color`` column is added; ``?`` tokens stay in place
because missing-value handling belongs to the loader. Category orders come from the UCI
``.names`` descriptions; the script fails if the data holds a value the declared order lacks.

Numeric bounds are public, never read off the rows: `ADULT_BOUNDS` and `WINE_BOUNDS` state each
range as a data owner could without looking (an age in years, the hours in a week, the 16
education codes, money rounded outward to a power of ten, wine chemistry from its units), each
with the ``source`` text written next to it in the schema file. The script fails if a row falls
outside them, so a re-vendor cannot bring data-derived bounds back.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from modelshare.common.data.schema import ATTRIBUTE_SOURCE, Attribute, CategoricalAttribute, NumericAttribute, Schema

__all__ = ["main", "build_all", "save_schema", "ADULT_BOUNDS", "WINE_BOUNDS"]

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
# Public bounds (low, high, whole numbers?, where the bounds come from). Every Adult number is a whole one.
Bound = tuple[float, float, bool, str]
ADULT_BOUNDS: dict[str, Bound] = {
    "age": (0, 120, True, "age in whole years; no person is older than 120"),
    "fnlwgt": (0, 10**7, True, "CPS final weight: number of people one record stands for, a count; "
               "rounded outward to a power of ten (10^7)"),
    "education-num": (1, 16, True, "the 16 education codes of adult.names (1 Preschool ... 16 Doctorate)"),
    "capital-gain": (0, 10**5, True, "US dollars, whole; the census top-codes capital gains at 99999; "
                     "rounded outward to a power of ten (10^5)"),
    "capital-loss": (0, 10**4, True, "US dollars, whole; rounded outward to a power of ten (10^4)"),
    "hours-per-week": (0, 168, True, "hours in a week (7 x 24)"),
}
ADULT_NUMERIC = tuple(ADULT_BOUNDS)

# Wine Quality chemistry (units from winequality.names / Cortez et al. 2009): concentrations start
# at 0 and end at a round figure above what any table wine holds; none is a whole-number column.
WINE_BOUNDS: dict[str, Bound] = {
    "fixed acidity": (0, 20, False, "g(tartaric acid)/dm3, a concentration: 0 to 20"),
    "volatile acidity": (0, 2, False, "g(acetic acid)/dm3, a concentration: 0 to 2"),
    "citric acid": (0, 2, False, "g/dm3, a concentration: 0 to 2"),
    "residual sugar": (0, 100, False, "g/dm3, a concentration: 0 to 100 (sweet wines start near 45)"),
    "chlorides": (0, 1, False, "g(sodium chloride)/dm3, a concentration: 0 to 1"),
    "free sulfur dioxide": (0, 500, False, "mg/dm3, part of total sulfur dioxide: the same 0 to 500"),
    "total sulfur dioxide": (0, 500, False, "mg/dm3, a concentration: 0 to 500 (EU limits for wine are at most 400)"),
    "density": (0.9, 1.1, False, "g/cm3: water 1, ethanol (0.79) lowers it, sugar raises it; 0.9 to 1.1"),
    "pH": (2, 5, False, "pH of wine, an acid solution near 3-4: 2 to 5 in whole units"),
    "sulphates": (0, 3, False, "g(potassium sulphate)/dm3, a concentration: 0 to 3"),
    "alcohol": (0, 20, False,
                "% by volume: yeast fermentation stops near 16 and vinho verde is not fortified; 0 to 20"),
}

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


def _public(name: str, bounds: dict[str, Bound]) -> NumericAttribute:
    """The attribute on its stated public range; `build_all` then checks every row lies inside it."""
    low, high, integer, _ = bounds[name]
    return NumericAttribute(name, float(low), float(high), integer)


SOURCES: dict[str, str] = {name: stated[3] for bounds in (ADULT_BOUNDS, WINE_BOUNDS) for name, stated in bounds.items()}


def save_schema(schema: Schema, path: Path, sources: dict[str, str] | None = None) -> None:
    """Write the schema as JSON with each attribute's ``source`` text (documentation, not in the fingerprint)."""
    sources = SOURCES if sources is None else sources
    data = schema.to_dict()
    for attr in data["attributes"]:
        if attr["name"] in sources:
            attr[ATTRIBUTE_SOURCE] = sources[attr["name"]]
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


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
        _public(name, ADULT_BOUNDS) if name in ADULT_BOUNDS else _observed(frame, name) for name in ADULT_COLUMNS
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
    attributes: tuple[CategoricalAttribute | NumericAttribute, ...] = (
        CategoricalAttribute("color", ("red", "white")), *(_public(str(c), WINE_BOUNDS) for c in chemistry))
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
        save_schema(schema, out / f"{name}.schema.json")
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
