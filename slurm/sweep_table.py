#!/usr/bin/env python3
"""The two helpers of slurm/sweep.sh (standard library only).

    sweep_table.py --set CONFIG.toml KEY VALUE   the configuration with KEY (`key` or
                                                 `section.key`) set to VALUE, on stdout
    sweep_table.py SWEEPDIR                      SWEEPDIR/table.csv: one row per run of the
                                                 sweep (SWEEPDIR/runs.txt), printed too

VALUE is written as TOML: a number or true/false as it is, anything else quoted. The key's line
is replaced where the configuration has it, else added to its section (created at the end when
missing). A row of the table: the run's name and value, its state from run.json (completed,
interrupted, failed, running, or "not started"), and the last row of diagnostics.csv (t, step,
energy, enstrophy).
"""
import csv
import json
import re
import sys
from pathlib import Path


def toml_value(v):
    if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|true|false", v):
        return v
    return json.dumps(v)


def set_key(text, dotted, value):
    section, _, key = dotted.rpartition(".")
    lines = text.splitlines()
    current, insert_at, header_seen = "", None, False
    for i, line in enumerate(lines):
        m = re.match(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$", line)
        if m:
            current = m.group(1).strip()
            header_seen = True
            if current == section:
                insert_at = i + 1
            continue
        if current == section and re.match(rf"^\s*{re.escape(key)}\s*=", line):
            lines[i] = f"{key} = {toml_value(value)}"
            return "\n".join(lines) + "\n"
        if section == "" and not header_seen:
            insert_at = i + 1
    new = f"{key} = {toml_value(value)}"
    if insert_at is None and section:
        lines += ["", f"[{section}]", new]
    else:
        lines.insert(insert_at or 0, new)
    return "\n".join(lines) + "\n"


def last_row(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return {}
    return rows[-1] if rows else {}


def table(sweep):
    names = (sweep / "runs.txt").read_text().split()
    out = []
    for name in names:
        run = sweep / name
        state = "not started"
        try:
            inv = json.loads((run / "run.json").read_text())["invocations"][-1]
            state = inv.get("status", "?")
        except (OSError, ValueError, KeyError, IndexError):
            pass
        row = last_row(run / "diagnostics.csv")
        key, _, value = name.partition("=")
        out.append({"run": name, key: value, "state": state,
                    **{c: row.get(c, "") for c in ("t", "step", "energy", "enstrophy")}})
    fields = list(out[0].keys()) if out else ["run"]
    with open(sweep / "table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(out)
    print((sweep / "table.csv").read_text(), end="")
    bad = [r["run"] for r in out if r["state"] != "completed"]
    if bad:
        print(f"not completed: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "--set":
        sys.stdout.write(set_key(Path(argv[2]).read_text(), argv[3], argv[4]))
        return 0
    if len(argv) == 2:
        return table(Path(argv[1]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
