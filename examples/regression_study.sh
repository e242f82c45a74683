#!/usr/bin/env bash
# A regression study (a numeric target) through a federation on one machine, in about a minute.
#
#   bash examples/regression_study.sh      # WORK=DIR keeps the files
#
# The owners learn the bundled wine table's `quality` (0 to 10). A regression study needs a public domain:
# `schema infer` drafts one from the table, which a reviewer checks (here: accepted as drafted) and marks
# reviewed by deleting its `domain = "data-derived"` line; dp releases refuse a draft that still has it.
# Each of 3 owners then releases a DiffPETs regression forest under dp:epsilon=5,trees=4 (depth 4), and the
# miner learns a regression tree and a random forest, reported as RMSE and MAE against BASIS.
# tests/project/test_examples.py runs it.
set -euo pipefail

WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK" && cd "$WORK"
echo "working in $WORK"

modelshare datasets export winequality --out wine.csv
modelshare schema infer wine.csv --target quality --target-range 0,10 --out wine.toml
sed -i '/^domain = "data-derived"/d' wine.toml          # the review: the bounds are public, not the rows'
modelshare simulate --data wine.csv --target quality --schema wine.toml \
    --owners 3 --requirement dp:epsilon=5,trees=4 --max-depth 4
