"""Regenerate the suite's bundled tables in ``suite_data/`` from their public sources (audit aid, not run time).

Usage::

    python -m experiments.suite_vendor --penguins penguins.csv --statsmodels DIR [--out DIR]

``--penguins`` is ``palmerpenguins/data/penguins.csv`` of the palmerpenguins wheel (0.1.6); ``--statsmodels``
is the ``statsmodels/datasets`` folder of the statsmodels wheel (0.15.0); the four scikit-learn tables
are read from the installed scikit-learn, which ships them. Every table is written as gzip-compressed
CSV with a header (fixed gzip timestamp, so reruns are byte-identical) beside its schema
``NAME.schema.json``. Numeric bounds and category lists are public statements written in
`experiments.suite_tables` (each with the ``source`` text the schema file carries), never
read off the rows; the script fails if any row falls outside them (`Schema.encode`), so a re-vendor
cannot bring data-derived domains in. Attribution and licences: ``suite_data/NOTICE``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn import datasets as sk
from sklearn.utils import Bunch

from experiments.suite_tables import DATA_DIR, SUITE, schema_of
from modelshare.common.data.schema import ATTRIBUTE_SOURCE

__all__ = ["build_all", "main"]


def _sklearn(loader: Callable[..., Bunch], classes: Sequence[str] | None = None) -> pd.DataFrame:
    """A scikit-learn bundled table as a frame: its feature names as columns, the class names as labels."""
    bunch = loader(as_frame=False)
    frame = pd.DataFrame(bunch.data, columns=[str(n) for n in bunch.feature_names])
    names = list(classes) if classes is not None else [str(n) for n in bunch.target_names]
    frame["class"] = np.asarray(names, dtype=object)[bunch.target]
    return frame


def _penguins(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype={"year": str})
    return frame[["island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "sex", "year",
                  "species"]]


def _anes96(folder: Path) -> pd.DataFrame:
    frame = pd.read_csv(folder / "anes96" / "anes96.csv", sep="\t")
    frame.columns = [c.strip("'") for c in frame.columns]
    for column in ("TVnews", "selfLR", "ClinLR", "DoleLR", "PID", "educ", "income"):
        frame[column] = frame[column].astype(int).astype(str)
    frame["vote"] = np.where(frame["vote"].astype(int) == 1, "Dole", "Clinton")
    return frame[["popul", "TVnews", "selfLR", "ClinLR", "DoleLR", "PID", "age", "educ", "income", "vote"]]


def _randhie(folder: Path) -> pd.DataFrame:
    raw = pd.read_csv(folder / "randhie" / "randhie.csv")
    health = np.select([raw["hlthp"] == 1, raw["hlthf"] == 1, raw["hlthg"] == 1], ["poor", "fair", "good"],
                       default="excellent")
    return pd.DataFrame({
        "lncoins": raw["lncoins"], "idp": raw["idp"].astype(int).astype(str), "lpi": raw["lpi"], "fmde": raw["fmde"],
        "physlm": raw["physlm"], "disea": raw["disea"], "health": health,
        "visits": np.where(raw["mdvis"] > 0, "some", "none"),
    })


MODES = ("air", "train", "bus", "car")


def _modechoice(folder: Path) -> pd.DataFrame:
    """Greene's long table (one row per traveller and mode) made
    wide: one row per traveller, the chosen mode as class."""
    raw = pd.read_csv(folder / "modechoice" / "modechoice.csv", sep=";")
    wide = raw.pivot(index="individual", columns="mode", values=["ttme", "invc", "invt", "gc"])
    frame = pd.DataFrame({f"{var}_{MODES[mode - 1]}": wide[(var, mode)] for var in ("ttme", "invc", "invt", "gc")
                          for mode in range(1, 5) if not (var == "ttme" and mode == 4)})  # a car has no terminal time
    people = raw.groupby("individual").first()
    frame.insert(0, "psize", people["psize"])
    frame.insert(0, "hinc", people["hinc"])
    chosen = raw[raw["choice"] == 1].set_index("individual")["mode"]
    frame["mode"] = [MODES[m - 1] for m in chosen.loc[frame.index]]
    return frame.reset_index(drop=True)


def build_all(penguins: Path, statsmodels: Path, out: Path) -> None:
    """Write every suite table and schema to ``out``, checking each table against its public schema."""
    frames = {
        "breast-cancer": _sklearn(sk.load_breast_cancer),
        "iris": _sklearn(sk.load_iris),
        "wine-recognition": _sklearn(sk.load_wine),
        "digits": _sklearn(sk.load_digits, [str(d) for d in range(10)]),
        "penguins": _penguins(penguins),
        "anes96": _anes96(statsmodels),
        "randhie": _randhie(statsmodels),
        "modechoice": _modechoice(statsmodels),
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in frames.items():
        info = SUITE[name]
        schema = schema_of(name)
        frame = frame.rename(columns={"class": schema.class_name})[[*schema.names, schema.class_name]]
        complete = frame.dropna()
        schema.encode(complete.astype({c: str for c in complete.columns if complete[c].dtype == object}),
                      source=name)  # raises SchemaError on a value outside the declared domain
        frame.to_csv(out / f"{name}.csv.gz", index=False, lineterminator="\n",
                     compression={"method": "gzip", "compresslevel": 9, "mtime": 0})
        data = schema.to_dict()
        for attr in data["attributes"]:
            if attr["name"] in info.sources:
                attr[ATTRIBUTE_SOURCE] = info.sources[attr["name"]]
        (out / f"{name}.schema.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--penguins", type=Path, required=True, help="penguins.csv of the palmerpenguins package")
    parser.add_argument("--statsmodels", type=Path, required=True, help="the statsmodels/datasets folder")
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    build_all(args.penguins, args.statsmodels, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
