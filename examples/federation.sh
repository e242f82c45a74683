#!/usr/bin/env bash
# A three-site federation on one machine, by hand: what `modelshare simulate` does in one command, as an
# operator, three site administrators and an admin would do it in their own shells.
#
#   bash examples/federation.sh            # about a minute; WORK=DIR keeps the files, PORT=N picks the port
#
# It deals the bundled Nursery table to three sites (every 5th row held out for scoring), provisions a CA and
# a kit per party, starts the miner and the three owner daemons as separate processes (mutual TLS on
# loopback) with their kits' start.sh, writes a study with simulate's defaults (`study init`), checks it at a
# site, creates it, waits for it and fetches its results (results/results.json, results/report.html). Every
# process it started is stopped with its kit's stop.sh when it ends, also on failure. tests/project/test_examples.py
# runs it.
set -euo pipefail

WORK=${WORK:-$(mktemp -d)}
PORT=${PORT:-50151}
TIMEOUT=${TIMEOUT:-300}
mkdir -p "$WORK" && cd "$WORK"
echo "working in $WORK"

# ---------------------------------------------------------------- the sites' tables (a site already has its own)
modelshare datasets export nursery --out nursery.csv
mkdir -p data/site-a data/site-b data/site-c
# every 5th row held out for scoring; the others dealt to a site at random (seeded, so every run deals alike)
awk 'BEGIN { srand(7); split("site-a site-b site-c", site, " ") }
     NR == 1 { for (i = 1; i <= 3; i++) print > ("data/" site[i] "/table.csv"); print > "test.csv"; next }
     (NR - 2) % 5 == 0 { print > "test.csv"; next }
     { print > ("data/" site[int(rand() * 3) + 1] "/table.csv") }' nursery.csv

# ---------------------------------------------------------------- 1. the operator provisions a kit per party
cat > project.toml <<EOF
name = "nursery-by-hand"

[[parties]]
name = "miner"
role = "miner"
address = "localhost:$PORT"
listen = "127.0.0.1:$PORT"

[[parties]]
name = "admin"
role = "admin"
EOF
for site in site-a site-b site-c; do
  cat >> project.toml <<EOF

[[parties]]
name = "$site"
role = "owner"
data = "$WORK/data/$site/table.csv"
class_column = "class"
[parties.policy]
mechanisms = ["apt"]
min_l = 2
max_c = 10
miners = ["miner"]
EOF
done
modelshare provision project.toml --out kits

# ---------------------------------------------------------------- 2. the miner and each site start their daemon
# A kit's start.sh runs its daemon in the background (pid and log beside the script) and returns once it
# serves; stop.sh stops it. The sites start after the miner, as they would dial it.
trap 'for kit in kits/site-a kits/site-b kits/site-c kits/miner; do sh "$kit/stop.sh" || true; done' EXIT
export MODELSHARE_START_TIMEOUT=$TIMEOUT
sh kits/miner/start.sh
for site in site-a site-b site-c; do
  sh "kits/$site/start.sh"
done

# ---------------------------------------------------------------- 3. the admin writes, checks and creates a study
modelshare study init --dataset nursery -o study.toml
sed -i 's|^# id = "my-study" .*|id = "nursery-by-hand"|; s|^# evaluation = "test.csv" .*|evaluation = "test.csv"|' study.toml
modelshare owner check study.toml --config kits/site-a/owner.toml     # would site-a answer it?
modelshare study create study.toml --config kits/admin/admin.toml
modelshare study wait nursery-by-hand --timeout "$TIMEOUT" --config kits/admin/admin.toml
modelshare study results nursery-by-hand --out results --config kits/admin/admin.toml
