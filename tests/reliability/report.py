"""Turn the reliability suite's JSON results into the Markdown table of docs/reliability.md.

    PGQUEUE_RELIABILITY_REPORT=results.json \\
        python -m pytest tests/reliability
    python -m tests.reliability.report results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLUMNS = ("scenario", "backend", "load held", "faults injected", "jobs lost", "duplicates")


def table(results: list[dict[str, Any]]) -> str:
    """One row per scenario and backend, in the scenarios' order."""
    rows = sorted(results, key=lambda r: (r["scenario"].split(".")[0].zfill(2), r["backend"]))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = (r["scenario"], r["backend"], r["load"], r["faults"], r["lost"], r["duplicates"])
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


RECOVERY_COLUMNS = ("scenario", "backend", "recovered (this run)", "bound")


def recovery_table(results: list[dict[str, Any]]) -> str:
    """Scenarios that time their recovery (11 on): what took how long, against its bound."""
    timed = [r for r in results if "recovery" in r]
    rows = sorted(timed, key=lambda r: (r["scenario"].split(".")[0].zfill(2), r["backend"]))
    lines = ["| " + " | ".join(RECOVERY_COLUMNS) + " |", "|" + "---|" * len(RECOVERY_COLUMNS)]
    for r in rows:
        cells = (r["scenario"], r["backend"], r["recovery"], r["bound"])
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def render(document: dict[str, Any]) -> str:
    results = document["results"]
    lost = sum(r["lost"] for r in results)
    machine = document.get("machine", {})
    summary = (
        f"Scale `{document['scale']}`: {len(results)} scenario runs, "
        f"{sum(r['jobs'] for r in results):,} jobs, {lost} lost; "
        f"{document.get('seconds', '?')} s on {machine.get('cpus', '?')} CPUs, "
        f"Python {machine.get('python', '?')}."
    )
    recovery = recovery_table(results)
    timed = "\n\n" + recovery if any("recovery" in r for r in results) else ""
    return table(results) + "\n\n" + summary + timed + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(render(json.loads(Path(argv[0]).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
