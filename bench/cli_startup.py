"""Start-up of the `modelshare` command line against `python -c "import grpc"`, measured in one run.

Each command runs as a fresh process (the environment's ``modelshare`` script, else ``python -m
modelshare.cli``), as a service manager runs the health probe ``modelshare owner status``. The
baseline is the bare interpreter importing grpc, the least any modelshare process that talks to a
miner pays. Runs are interleaved (one of each command per round) so that load on a shared machine
hits every command alike; each command's median over the rounds is divided by the baseline's.
The owner's kit comes from a throw-away federation (`modelshare.provision`), with no daemon
running, so ``owner status`` reads the config and finds no status file (exit 1), as a probe does
before the daemon's first start. Results go to bench/RESULTS.md.

    python bench/cli_startup.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import machine, write_section  # bench/ is sys.path[0] when run as a script

from modelshare.provision import issue_throwaway_federation

HEADING = "## CLI start-up (bench/cli_startup.py)"
BASELINE = 'python -c "import grpc"'
CONFIG = 'python -c "import modelshare.owner_node.config"'
HELP = "modelshare owner status --help"
PROBE = "modelshare owner status --config owner.toml, no daemon (exit 1)"


def _modelshare() -> list[str]:
    """The modelshare command of this environment: its script beside this Python, else the module."""
    script = Path(sys.executable).with_name("modelshare")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "modelshare.cli"]


def commands(kit: Path) -> dict[str, tuple[list[str], int]]:
    """Label -> (argv, the exit status it must end with)."""
    ms = _modelshare()
    return {
        BASELINE: ([sys.executable, "-c", "import grpc"], 0),
        CONFIG: ([sys.executable, "-c", "import modelshare.owner_node.config"], 0),
        "modelshare --help": ([*ms, "--help"], 0),
        HELP: ([*ms, "owner", "status", "--help"], 0),
        "modelshare owner status --config MISSING (exit 2)": ([*ms, "owner", "status", "--config",
                                                               str(kit / "missing.toml")], 2),
        PROBE: ([*ms, "owner", "status", "--config", str(kit / "owner.toml")], 1),
        "modelshare experiment sources --help (a heavy command, for contrast)": ([*ms, "experiment", "sources",
                                                                                  "--help"], 0),
    }


def measure(runs: dict[str, tuple[list[str], int]], rounds: int) -> dict[str, float]:
    """Median wall seconds of each command over ``rounds`` interleaved rounds (after one warm-up round)."""
    times: dict[str, list[float]] = {label: [] for label in runs}
    for round_ in range(rounds + 1):
        for label, (argv, expected) in runs.items():
            start = time.perf_counter()
            done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wall = time.perf_counter() - start
            if done.returncode != expected:
                raise SystemExit(f"{label}: exit {done.returncode}, expected {expected}: {done.stderr.strip()}")
            if round_:  # the first round warms the file cache
                times[label].append(wall)
    return {label: statistics.median(values) for label, values in times.items()}


def write_results(medians: dict[str, float], rounds: int, load: tuple[float, float]) -> None:
    base = medians[BASELINE]
    lines = [
        HEADING,
        "",
        f"`python bench/cli_startup.py --rounds {rounds}` on {datetime.date.today().isoformat()}, {machine()}. Wall "
        f"time of each command as a fresh process (the venv's `modelshare` script), median of {rounds} interleaved "
        f"rounds after a warm-up round, over the median wall time of `{BASELINE}` in the same run. The kit is a "
        "throw-away federation's owner kit; no daemon runs, so `owner status` finds no status file (exit 1). "
        f"The machine is shared: its 1-minute load average was {load[0]:.1f} before and {load[1]:.1f} after the run.",
        "",
        "| command | median wall | ratio to `import grpc` |",
        "|---|---:|---:|",
    ]
    lines += [f"| `{label}` | {1000 * wall:.0f} ms | {wall / base:.2f} |" for label, wall in medians.items()]
    lines += [
        "",
        f"Interpretation: building the parser of `owner status` costs {1000 * (medians[HELP] - base):.0f} ms more "
        "than importing grpc (it imports no other command, nor the daemon, the learners or pandas). The probe "
        f"itself takes {medians[PROBE] / base:.1f}x the baseline, and importing "
        "`modelshare.owner_node.config` alone, which "
        f"the probe needs to read its kit, takes {medians[CONFIG] / base:.1f}x of it (the validated config models "
        "and what they import; pandas is not among them, `tests/modelshare/test_cli_surface.py` "
        "checks the parser's imports).",
    ]
    write_section(HEADING, "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds of every command (default 15)")
    parser.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="modelshare-cli-startup-"))
    before = os.getloadavg()[0]
    try:
        (root / "table.csv").write_text("colour,class\nred,yes\n", encoding="utf-8")  # the config names a table
        kit = issue_throwaway_federation(root / "kits", owners=["site-a"], address="localhost:50051",
                                         owner_data={"site-a": (str(root / "table.csv"), "class")})["site-a"]
        medians = measure(commands(kit), args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for label, wall in medians.items():
        print(f"{1000 * wall:7.0f} ms  {wall / medians[BASELINE]:5.2f}x  {label}")
    if not args.no_write:
        write_results(medians, args.rounds, (before, os.getloadavg()[0]))


if __name__ == "__main__":
    main()
