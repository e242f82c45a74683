"""`modelshare provision`: make the CA and every party's kit, add a party later, or revoke one.

After provisioning (or adding a party) it prints the commands to run next with the paths it wrote
(`next_commands`): start the miner with its kit's start.sh, hand each owner its kit to start, write
and create a study with the admin's kit, and follow it; under ``--json`` they are the ``next`` list.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from rich.table import Table

from modelshare.cli.common import add_json, err, out
from modelshare.common.federation.kit import Party, Roster
from modelshare.common.federation.signing import KEY_ID_PREFIX
from modelshare.provision import (
    ProvisionError,
    add_party,
    load_project,
    provision,
    provisioned_roster,
    revoke_party,
)

__all__ = ["cmd_provision", "configure", "next_commands"]


def _run(args: argparse.Namespace) -> tuple[str, list[str]]:
    """Do what the flags ask; returns the action and the parties it concerned."""
    if args.add is not None:
        add_party(args.project, args.out, args.add)
        return "add", [args.add]
    if args.revoke is not None:
        project = load_project(args.project).name
        held = provisioned_roster(args.out).project
        if project != held:
            raise ProvisionError(f"{args.project} describes project {project!r}, but {args.out} holds {held!r}")
        revoke_party(args.out, args.revoke)
        return "revoke", [args.revoke]
    return "provision", list(provision(args.project, args.out))


def _row(party: Party, kit: Path) -> dict[str, object]:
    return {"name": party.name, "role": party.role, "key_id": party.key_id, "dir": str(kit),
            "revoked": party.revoked, "revoked_at": party.revoked_at}


def next_commands(out_dir: Path, roster: Roster, names: list[str]) -> list[dict[str, str]]:
    """What to run after provisioning the parties ``names`` under ``out_dir``: one ``{"step", "command"}`` each."""
    def kit(name: str, file: str) -> str:
        return shlex.quote(str(out_dir / name / file))

    parties = [roster.parties[name] for name in names if not roster.parties[name].revoked]
    steps = [{"step": "start the miner (on its host, with its kit)", "command": f"sh {kit(p.name, 'start.sh')}"}
             for p in parties if p.role == "miner"]
    steps += [{"step": f"give {p.name} its kit {out_dir / p.name}; at the site, start its daemon",
               "command": f"sh {kit(p.name, 'start.sh')}"} for p in parties if p.role == "owner"]
    admins = [p.name for p in roster.parties.values() if p.role == "admin" and not p.revoked]
    if admins:
        config = f"--config {kit(admins[0], 'admin.toml')}"
        steps += [{"step": "check the miner serves", "command": f"modelshare miner status {config}"},
                  {"step": "write a study (simulate's defaults) and create it",
                   "command": f"modelshare study init -o study.toml && modelshare study create study.toml {config}"},
                  {"step": "follow it to the end", "command": f"modelshare study status latest --follow {config}"},
                  {"step": "fetch its results", "command": f"modelshare study results latest --out results {config}"}]
    return steps


def cmd_provision(args: argparse.Namespace) -> int:
    """Provision, add or revoke; a bad project file or kit directory raises (`modelshare.cli.main` exits 2)."""
    action, names = _run(args)
    roster = provisioned_roster(args.out)
    rows = [_row(roster.parties[name], args.out / name) for name in names]
    steps = next_commands(args.out, roster, names) if action == "provision" else []
    if action == "add" and roster.parties[names[0]].role == "owner":
        steps = next_commands(args.out, roster, names)[:1]
    if args.json:
        print(json.dumps({"project": roster.project, "action": action, "out": str(args.out), "parties": rows,
                          "next": steps}, indent=2))
        return 0
    table = Table(title=f"project {roster.project}: {action}")
    for col in ("name", "role", "key id", "kit", "status"):
        table.add_column(col, no_wrap=col != "kit", overflow="fold")
    for row in rows:
        status = f"revoked {row['revoked_at']}" if row["revoked"] else "active"
        table.add_row(str(row["name"]), str(row["role"]), str(row["key_id"])[:KEY_ID_PREFIX], str(row["dir"]), status)
    out.print(table)
    if action != "provision":
        changed = "roster.json (and the miner's crl.pem)" if action == "revoke" else "roster.json"
        err.print(f"updated {changed} in the miner's and admins' kits under {args.out}: copy it to where they run")
    if steps:
        out.print("next:", highlight=False)
        for number, step in enumerate(steps, 1):
            out.print(f"  {number}. {step['step']}:\n       {step['command']}", highlight=False, soft_wrap=True)
    return 0


def configure(prov: argparse.ArgumentParser) -> None:
    """`provision PROJECT --out DIR [--add NAME | --revoke NAME]`."""
    prov.add_argument("project", type=Path, help="project description (project.toml)")
    prov.add_argument("--out", type=Path, required=True, help="directory of the kits; ca/ in it holds the CA")
    change = prov.add_mutually_exclusive_group()
    change.add_argument("--add", metavar="NAME",
                        help="issue a kit for a party of project.toml added after provisioning")
    change.add_argument("--revoke", metavar="NAME",
                        help="revoke a provisioned party (the miner refuses it from then on)")
    add_json(prov, "the project, the action and the parties it concerned")
    prov.set_defaults(func=cmd_provision)
