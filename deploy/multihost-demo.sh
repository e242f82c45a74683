#!/usr/bin/env bash
# A modelshare federation across five network namespaces on one machine, with a network partition.
#
# Run as root (it creates network namespaces):
#
#     sudo deploy/multihost-demo.sh                  # or: MODELSHARE=/path/to/venv/bin/modelshare ...
#
# What it does:
#   1. creates one network namespace per party (miner, admin, site-a, site-b, site-c), each with an
#      eth0 joined by a veth pair to a Linux bridge that lives in a sixth, private "switch"
#      namespace (so nothing touches the host's interfaces, routes or firewall), addressed in
#      ${DEMO_NET}.0/24: miner .1, admin .2, site-a .11, site-b .12, site-c .13;
#   2. provisions a project whose miner address is the miner namespace's real address (so the
#      miner's certificate carries IP:${DEMO_NET}.1) with `modelshare provision`, and deals the bundled
#      Nursery table into one private CSV per site and a held-out test table;
#   3. starts `modelshare miner serve` and three `modelshare owner serve` in their namespaces, each
#      with its own kit, and waits on readiness signals (the miner's ready.json, each owner's TCP
#      connection to the miner and status file, then `modelshare owner status`), never on fixed
#      sleeps; a wait checks files and sockets, and each `modelshare` command that reports (a
#      Python start, seconds on a loaded machine) runs once the thing it reports has happened,
#      or holds one call open (`study wait`), rather than being run again and again;
#   4. cuts site-c's link (its veth port on the bridge goes down), creates a study as the admin,
#      shows that site-a and site-b answer while the study waits for site-c and that site-c's
#      daemon reports the failure (`owner status` exits non-zero), restores the link, and waits
#      until site-c's daemon (retrying with backoff) answers and the study completes;
#   5. prints the study's status and results, and tears everything down (processes, namespaces,
#      the bridge, the work directory) on exit, also on failure, Ctrl-C or timeout.
#
# Lines starting with "DEMO " are stable markers for scripts (tests/project/test_deploy.py greps them).
#
# Environment:
#   MODELSHARE       the modelshare command (default: the one on PATH)
#   PYTHON           a Python 3 for reading JSON output (default: the interpreter next to
#                    $MODELSHARE, else python3)
#   DEMO_NET         first three octets of the private /24 (default 10.77.0)
#   DEMO_TIMEOUT     deadline of the whole run in seconds (default 240)
#   DEMO_SLOWDOWN    how many times longer than on an idle machine each step may take (default:
#                    the 1-minute load average per core, rounded up, between 1 and 4); every
#                    step's own limit is this times its idle-machine limit, within DEMO_TIMEOUT
#   DEMO_WORK_DIR    keep kits, data, logs and results in this new directory (default: a
#                    temporary directory, removed at exit)
#   DEMO_DATASET     bundled dataset to deal to the sites (default nursery)
set -euo pipefail

DEMO_NET=${DEMO_NET:-10.77.0}
DEMO_TIMEOUT=${DEMO_TIMEOUT:-240}
DEMO_DATASET=${DEMO_DATASET:-nursery}
PORT=50051
STUDY_ID=multihost-demo
SITES=(site-a site-b site-c)
CUT_SITE=site-c
declare -A OCTET=([miner]=1 [admin]=2 [site-a]=11 [site-b]=12 [site-c]=13)
PARTIES=(miner admin "${SITES[@]}")

RUN_DEADLINE=$((SECONDS + DEMO_TIMEOUT))
PREFIX="ms$$"                       # namespace names are unique per run: ms<pid>-<party>
SWITCH_NS="${PREFIX}-switch"
CREATED_NS=()
declare -A PID=()
WORK=""
KEEP_WORK=0
WATCHDOG=""

say() { printf '[demo %3ds] %s\n' "$SECONDS" "$*"; }
mark() { printf 'DEMO %s\n' "$*"; }
ns() { printf '%s-%s' "$PREFIX" "$1"; }
# Redirect the output of external commands only, never of a call of these functions in the
# foreground: bash applies such a redirection to itself, and a signal trap (fail, cleanup) running
# meanwhile would print into it.
in_ns() { local party=$1; shift; ip netns exec "$(ns "$party")" "$@"; }
ms() { local party=$1; shift; in_ns "$party" "$MODELSHARE" "$@"; }
addr() { printf '%s.%s' "$DEMO_NET" "${OCTET[$1]}"; }

tail_logs() {
  local log
  [[ -n $WORK && -d $WORK/logs ]] || return 0
  for log in "$WORK"/logs/*.log; do
    [[ -e $log ]] || continue
    printf -- '--- last lines of %s ---\n' "$log" >&2
    tail -n 15 "$log" >&2 || true
  done
}

fail() {
  printf '[demo %3ds] FAILED: %s\n' "$SECONDS" "$*" >&2
  mark "failed $*"
  tail_logs
  exit 1
}

# ------------------------------------------------------------------ teardown (always runs)
running() { # running PID: the process exists and is no zombie (Linux /proc, no fork)
  local stat
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

cleanup() {
  local status=$? party pid deadline leftover i
  trap - EXIT INT TERM ERR
  set +e
  # No `wait` here: cleanup may run from a signal trap that interrupted a `wait`, where bash can
  # miss a child's exit; liveness is polled instead (a zombie counts as stopped).
  [[ -n $WATCHDOG ]] && kill "$WATCHDOG" 2>/dev/null
  for party in "${!PID[@]}"; do
    kill -TERM -- "-${PID[$party]}" 2>/dev/null   # the party's process group (see start)
  done
  deadline=$((SECONDS + 15))
  for party in "${!PID[@]}"; do
    pid=${PID[$party]}
    while running "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    if running "$pid"; then
      say "teardown: $party (pid $pid) did not stop on SIGTERM; killing its process group"
      kill -KILL -- "-$pid" 2>/dev/null
    fi
  done
  for ((i = ${#CREATED_NS[@]} - 1; i >= 0; i--)); do
    # deleting a namespace does not stop what runs in it: kill any process still inside first
    leftover=$(ip netns pids "${CREATED_NS[$i]}" 2>/dev/null | tr '\n' ' ')
    if [[ -n ${leftover// /} ]]; then
      say "teardown: killing processes left in ${CREATED_NS[$i]}: $leftover"
      # shellcheck disable=SC2086
      kill -KILL $leftover 2>/dev/null
    fi
    ip netns delete "${CREATED_NS[$i]}" 2>/dev/null || say "teardown: could not delete namespace ${CREATED_NS[$i]}"
  done
  if [[ -n $WORK && $KEEP_WORK -eq 0 ]]; then
    rm -rf -- "$WORK"
  elif [[ -n $WORK ]]; then
    say "kept $WORK (kits, data, study.toml, logs, results)"
  fi
  say "teardown done: ${#PID[@]} processes stopped, ${#CREATED_NS[@]} namespaces deleted"
  mark "teardown-complete status=$status"
  exit "$status"
}
trap cleanup EXIT
trap 'fail "interrupted"' INT
trap 'fail "timed out: the whole run exceeded DEMO_TIMEOUT=${DEMO_TIMEOUT}s"' TERM
trap 'printf "[demo %3ds] command failed (line %s): %s\n" "$SECONDS" "$LINENO" "$BASH_COMMAND" >&2' ERR

# ------------------------------------------------------------------ waiting, with deadlines
check_alive() {
  local party
  for party in "${!PID[@]}"; do
    running "${PID[$party]}" || fail "$party (pid ${PID[$party]}) exited; see its log below"
  done
}

# wait_for SECONDS DESCRIPTION COMMAND...: run COMMAND until it succeeds. Fails after SECONDS times
# DEMO_SLOWDOWN (or at the run's deadline), or as soon as a started party dies. The 0.2 s pause is
# the polling interval of a readiness check, not a guess at how long something takes; COMMAND
# should be cheap (a file, a socket), since it runs every 0.2 s.
wait_for() {
  local limit=$(($1 * DEMO_SLOWDOWN)) what=$2 until
  shift 2
  until=$((SECONDS + limit))
  ((until <= RUN_DEADLINE)) || until=$RUN_DEADLINE
  until "$@"; do
    check_alive
    ((SECONDS < until)) || fail "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

json_field() { # json_field FILE KEY: a top-level field of a JSON file
  "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# ------------------------------------------------------------------ preflight
[[ $EUID -eq 0 ]] || { echo "multihost-demo: run as root (it creates network namespaces and veth pairs)" >&2; exit 2; }
for tool in ip ss setsid awk timeout; do
  command -v "$tool" >/dev/null || { echo "multihost-demo: the $tool command is missing (iproute2, util-linux, coreutils)" >&2; exit 2; }
done
[[ $DEMO_TIMEOUT =~ ^[1-9][0-9]*$ ]] || { echo "multihost-demo: DEMO_TIMEOUT=$DEMO_TIMEOUT is not a number of seconds" >&2; exit 2; }
if [[ -z ${DEMO_SLOWDOWN:-} ]]; then  # the 1-minute load per core, rounded up, within 1..4
  DEMO_SLOWDOWN=$(awk -v cores="$(nproc)" '{ s = int($1 / cores); if (s < $1 / cores) s++; print (s < 1 ? 1 : s > 4 ? 4 : s) }' /proc/loadavg)
fi
[[ $DEMO_SLOWDOWN =~ ^[1-9][0-9]*$ ]] || { echo "multihost-demo: DEMO_SLOWDOWN=$DEMO_SLOWDOWN is not a whole number >= 1" >&2; exit 2; }
MODELSHARE=${MODELSHARE:-$(command -v modelshare || true)}
[[ -n $MODELSHARE && -x $MODELSHARE ]] || {
  echo "multihost-demo: no modelshare command; activate the venv or set MODELSHARE=/path/to/modelshare" >&2
  exit 2
}
MODELSHARE=$(readlink -f "$MODELSHARE")
if [[ -z ${PYTHON:-} ]]; then
  PYTHON=$(dirname "$MODELSHARE")/python
  [[ -x $PYTHON ]] || PYTHON=$(command -v python3)
fi
[[ $DEMO_NET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || { echo "multihost-demo: DEMO_NET=$DEMO_NET is not A.B.C" >&2; exit 2; }

if [[ -n ${DEMO_WORK_DIR:-} ]]; then
  [[ ! -e $DEMO_WORK_DIR ]] || [[ -z $(ls -A "$DEMO_WORK_DIR") ]] || {
    echo "multihost-demo: DEMO_WORK_DIR=$DEMO_WORK_DIR is not empty" >&2; exit 2; }
  mkdir -p "$DEMO_WORK_DIR"
  WORK=$(readlink -f "$DEMO_WORK_DIR")
  KEEP_WORK=1
else
  WORK=$(mktemp -d /tmp/modelshare-demo.XXXXXX)
fi
mkdir -p "$WORK/logs" "$WORK/data"

# The whole run has a deadline: a watchdog sends SIGTERM, whose trap fails the run and tears down.
# (It stops its own sleep when told to stop, and holds no output open, so callers see EOF at once.)
(
  sleep "$DEMO_TIMEOUT" &
  trap 'kill $! 2>/dev/null; exit 0' TERM
  wait $! && kill -TERM $$
) </dev/null >/dev/null 2>&1 &
WATCHDOG=$!

say "modelshare: $MODELSHARE; work directory: $WORK; deadline ${DEMO_TIMEOUT}s; step limits x${DEMO_SLOWDOWN} (load $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores)"

# ------------------------------------------------------------------ 1. the network
add_ns() {
  ip netns add "$1"
  CREATED_NS+=("$1")
  ip -n "$1" link set lo up
}

say "network: bridge br0 in namespace $SWITCH_NS, one namespace per party on ${DEMO_NET}.0/24"
add_ns "$SWITCH_NS"
ip -n "$SWITCH_NS" link add br0 type bridge
ip -n "$SWITCH_NS" link set br0 up
for party in "${PARTIES[@]}"; do
  add_ns "$(ns "$party")"
  # eth0 in the party's namespace, its peer "p-<party>" a port of the bridge
  ip link add eth0 netns "$(ns "$party")" type veth peer name "p-$party" netns "$SWITCH_NS"
  ip -n "$SWITCH_NS" link set "p-$party" master br0 up
  ip -n "$(ns "$party")" addr add "$(addr "$party")/24" dev eth0
  ip -n "$(ns "$party")" link set eth0 up
  printf '    %-8s namespace %-16s eth0 %s/24  (bridge port p-%s)\n' "$party" "$(ns "$party")" "$(addr "$party")" "$party"
done

# ------------------------------------------------------------------ 2. data, project, kits, study
"$MODELSHARE" datasets export "$DEMO_DATASET" --out "$WORK/data/all.csv" 2>>"$WORK/logs/setup.log" &
EXPORT_PID=$!                       # runs while the project is provisioned

cat >"$WORK/project.toml" <<EOF
# written by deploy/multihost-demo.sh: the parties of deploy/project.toml at the namespaces' addresses
name = "multihost-demo"
[[parties]]
name = "miner"
role = "miner"
address = "$(addr miner):$PORT"
listen = "$(addr miner):$PORT"
[[parties]]
name = "admin"
role = "admin"
hosts = ["$(addr admin)"]
EOF
for site in "${SITES[@]}"; do
  cat >>"$WORK/project.toml" <<EOF
[[parties]]
name = "$site"
role = "owner"
hosts = ["$(addr "$site")"]
data = "$WORK/data/$site.csv"
class_column = "class"
EOF
done
"$MODELSHARE" provision "$WORK/project.toml" --out "$WORK/kits" --json >"$WORK/logs/provision.json" 2>>"$WORK/logs/setup.log"
KITS=$WORK/kits
say "provisioned kits for ${PARTIES[*]} in $KITS (miner address $(addr miner):$PORT)"
if command -v openssl >/dev/null; then
  san=$(openssl x509 -in "$KITS/miner/tls.crt" -noout -ext subjectAltName | tail -n +2 | sed 's/^ *//')
  say "miner certificate: subject alternative names $san"
  [[ $san == *"IP Address:$(addr miner)"* ]] || fail "the miner's certificate does not name $(addr miner)"
fi

say "data: dealing the bundled '$DEMO_DATASET' table at random to ${SITES[*]} (a fifth held out for evaluation)"
wait "$EXPORT_PID" || fail "modelshare datasets export $DEMO_DATASET failed (see $WORK/logs/setup.log)"
# (A seeded random deal: the bundled tables are sorted, so dealing rows in turn would hand a site
# all rows of one attribute value.)
awk -F, -v dir="$WORK/data" -v sites="${SITES[*]}" '
  BEGIN { n = split(sites, site, " "); srand(7) }
  NR == 1 { print > (dir "/test.csv"); for (i = 1; i <= n; i++) print > (dir "/" site[i] ".csv"); next }
  { if (rand() < 0.2) print > (dir "/test.csv"); else print > (dir "/" site[int(rand() * n) + 1] ".csv") }
' "$WORK/data/all.csv"
for part in "${SITES[@]}" test; do
  printf '    %-8s %s rows\n' "$part" "$(($(wc -l <"$WORK/data/$part.csv") - 1))"
done

cat >"$WORK/study.toml" <<EOF
[study]
id = "$STUDY_ID"
title = "modelshare across network namespaces"
owners = [$(printf '"%s", ' "${SITES[@]}" | sed 's/, $//')]
deadline_minutes = 10
seed = 0

[schema]
dataset = "$DEMO_DATASET"

[release]
mechanism = "apt"
requirement = "cl-diversity:c=5,l=2"
disclosure = "hit_miss"

[training]
learner = "multiway"
min_samples_leaf = 1

[mining]
global_models = ["decision-tree", "naive-bayes"]
pgen_scale = 2                       # 20,000-odd pseudo rows: enough to show mining, cheap on a loaded machine
evaluation = "data/test.csv"
EOF

# ------------------------------------------------------------------ 3. start the parties
start() { # start PARTY ARGS...: run `modelshare ARGS` in the party's namespace, in the background
  local party=$1
  shift
  # setsid (which does not fork here: a background job is no process-group leader) then `ip netns
  # exec` both exec, so $! is the modelshare process itself, leading its own process group: the
  # teardown signals that group, which takes the miner's verification workers along.
  setsid ip netns exec "$(ns "$party")" "$MODELSHARE" "$@" >"$WORK/logs/$party.log" 2>&1 </dev/null &
  PID[$party]=$!
  say "started $party in $(ns "$party"): modelshare $* (pid ${PID[$party]})"
}

start miner miner serve --config "$KITS/miner/miner.toml"
wait_for 30 "the miner's ready.json" test -s "$KITS/miner/state/ready.json"
say "miner ready: $(cat "$KITS/miner/state/ready.json")"
for party in admin "${SITES[@]}"; do
  # a TCP connection across the bridge from each namespace (bash's /dev/tcp, 2 s limit)
  in_ns "$party" timeout 2 bash -c "exec 3<>/dev/tcp/$(addr miner)/$PORT" \
    || fail "$party ($(addr "$party")) cannot reach the miner at $(addr miner):$PORT"
done
mark "network-ok every party reaches the miner at $(addr miner):$PORT"

for site in "${SITES[@]}"; do
  start "$site" owner serve --config "$KITS/$site/owner.toml"
done
ms admin miner status --config "$KITS/admin/admin.toml"   # the admin's health check of the miner

connected() { # connected SITE: the owner holds an established TCP connection to the miner and wrote its status file
  [[ -n $(in_ns "$1" ss -Htn state established dst "$(addr miner):$PORT") && -s $KITS/$1/state/status.json ]]
}
owners_healthy() { # every owner's `owner status` exits 0 (run side by side: each is a Python start)
  local site pids=() ok=0
  for site in "${SITES[@]}"; do
    ms "$site" owner status --config "$KITS/$site/owner.toml" >"$WORK/logs/$site.status" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || ok=1; done
  return "$ok"
}
for site in "${SITES[@]}"; do
  wait_for 30 "$site's connection to the miner" connected "$site"
done
say "owners connected to the miner; asking each daemon for its health (modelshare owner status)"
owners_healthy || { cat "$WORK"/logs/*.status >&2; fail "an owner's daemon does not report healthy"; }
cat "$WORK"/logs/*.status
mark "owners-connected ${SITES[*]}"

# ------------------------------------------------------------------ 4. study, with a partition
say "PARTITION: cutting $CUT_SITE's link (bridge port p-$CUT_SITE down)"
ip -n "$SWITCH_NS" link set "p-$CUT_SITE" down
mark "partition-cut $CUT_SITE"

say "admin: creating study $STUDY_ID"
ms admin study create "$WORK/study.toml" --config "$KITS/admin/admin.toml"

STATUS_JSON=$WORK/status.json
study_status() {
  ip netns exec "$(ns admin)" "$MODELSHARE" study status "$STUDY_ID" --config "$KITS/admin/admin.toml" --json \
    >"$STATUS_JSON"
}
answer_of() { # answer_of SITE: that owner's answer in the last study status
  "$PYTHON" -c 'import json, sys; print({a["owner"]: a["state"] for a in json.load(open(sys.argv[1]))["answers"]}[sys.argv[2]])' \
    "$STATUS_JSON" "$1"
}
others_answered() { # each connected owner has recorded the miner's acknowledgement of an answer
  local site
  for site in "${SITES[@]}"; do
    [[ $site == "$CUT_SITE" ]] && continue
    [[ -s $KITS/$site/state/answers.jsonl ]] || return 1
  done
}
wait_for 90 "the connected owners to answer" others_answered
study_status || fail "modelshare study status $STUDY_ID failed"
for site in "${SITES[@]}"; do
  [[ $site == "$CUT_SITE" || $(answer_of "$site") != waiting ]] || fail "the miner still waits for $site, which recorded an answer"
done
state=$(json_field "$STATUS_JSON" state)
cut_answer=$(answer_of "$CUT_SITE")
say "study $STUDY_ID is $state; $CUT_SITE: $cut_answer; others answered"
[[ $state == open && $cut_answer == waiting ]] || fail "expected the study open and waiting for $CUT_SITE, got $state / $cut_answer"
mark "partition-holds study=$state $CUT_SITE=$cut_answer"

cut_failing() { # the cut owner's status file counts a failed call to the miner (its held Poll ran out)
  grep -Eq '"consecutive_failures": [1-9]' "$KITS/$CUT_SITE/state/status.json"
}
wait_for 60 "$CUT_SITE's daemon to notice the partition" cut_failing
! ms "$CUT_SITE" owner status --config "$KITS/$CUT_SITE/owner.toml" \
  || fail "$CUT_SITE's daemon counts a failed call but owner status says it is healthy"
mark "partition-noticed $CUT_SITE"

say "PARTITION: restoring $CUT_SITE's link"
ip -n "$SWITCH_NS" link set "p-$CUT_SITE" up
mark "partition-restored $CUT_SITE"

# `study wait` holds the miner's WatchStudy until the study ends: one process, no polling. Exit 3
# is its timeout, 1 a failed study (reported below from its JSON).
limit=$((120 * DEMO_SLOWDOWN))
((SECONDS + limit <= RUN_DEADLINE)) || limit=$((RUN_DEADLINE - SECONDS))
((limit > 0)) || fail "no time left to wait for study $STUDY_ID"
code=0
ip netns exec "$(ns admin)" "$MODELSHARE" study wait "$STUDY_ID" --timeout "$limit" --json \
  --config "$KITS/admin/admin.toml" >"$STATUS_JSON" || code=$?
check_alive
((code != 3)) || fail "timed out after ${limit}s waiting for study $STUDY_ID to finish"
((code <= 1)) || fail "modelshare study wait $STUDY_ID failed (exit $code): $(cat "$STATUS_JSON")"
state=$(json_field "$STATUS_JSON" state)
"$PYTHON" - "$STATUS_JSON" <<'EOF'
import json, sys
status = json.load(open(sys.argv[1]))
print(f"study {status['id']}: {status['state']}" + (f" ({status['reason']})" if status["reason"] else ""))
for a in status["answers"]:
    print(f"    {a['owner']:8} {a['state']:10} {a['at'] or ''} {a['reason']}")
EOF
[[ $state == done ]] || fail "study $STUDY_ID $state: $(json_field "$STATUS_JSON" reason)"
mark "study-done $STUDY_ID $CUT_SITE=$(answer_of "$CUT_SITE")"

# ------------------------------------------------------------------ 5. results
# (the cut site's health, side by side with fetching the results: each is a Python start)
ms "$CUT_SITE" owner status --config "$KITS/$CUT_SITE/owner.toml" >"$WORK/logs/$CUT_SITE.status" 2>&1 &
health=$!
ms admin study results "$STUDY_ID" --out "$WORK/results" --config "$KITS/admin/admin.toml"
wait "$health" || fail "$CUT_SITE's daemon is not healthy after the partition: $(cat "$WORK/logs/$CUT_SITE.status")"
cat "$WORK/logs/$CUT_SITE.status"
mark "healthy-again $CUT_SITE"
"$PYTHON" - "$WORK/results/results.json" <<'EOF'
import json, sys
results = json.load(open(sys.argv[1]))
for o in results["owners"]:
    print(f"DEMO owner {o['owner']} leaves={o['leaves']} claim={o['claim']} audit={'PASS' if o['audit_passed'] else 'FAIL'}")
for m in results["models"]:
    accuracy = "-" if m["accuracy"] is None else f"{m['accuracy']:.4f}"
    print(f"DEMO model {m['model']} train_rows={m['train_rows']} accuracy={accuracy}")
EOF
say "done: a study across ${#PARTIES[@]} namespaces, with $CUT_SITE partitioned and restored, in ${SECONDS}s"
mark "complete seconds=$SECONDS"
