"""The read model's place in the layering (DESIGN.md §2): it reads tables, it runs no service.

It may import ``core``, ``runtime`` and the table declarations of the packages that own the
tables it reads; those declarations must stay leaves (nothing of ours but the store's
metadata). Only the read side (dashboard, notifier's rendering) imports the read model.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ira

ROOT = Path(ira.__file__).parent
TABLE_MODULES = {"ira.triage.tables", "ira.coordinator.schema", "ira.connectors.tickets.schema", "ira.replay.tables",
                 "ira.agents.tables"}
READERS = {"dashboard", "notifier", "readmodel", "replay"}


def ira_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ira"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ira")}
    return found


def module_path(name: str) -> Path:
    return ROOT.parent / (name.replace(".", "/") + ".py")


def test_read_model_imports_only_inward_modules_and_table_declarations() -> None:
    for path in (ROOT / "readmodel").glob("*.py"):
        for name in ira_imports(path):
            inward = name.split(".")[1] in {"core", "runtime", "readmodel"}
            assert inward or name in TABLE_MODULES, f"{path.name} imports {name}"


def test_table_declarations_stay_leaves() -> None:
    for name in TABLE_MODULES:
        assert ira_imports(module_path(name)) <= {"ira.runtime.store.schema", "ira.core"}, name  # core is pure


def test_only_the_read_side_imports_the_read_model() -> None:
    for path in ROOT.rglob("*.py"):
        package = path.relative_to(ROOT).parts[0]
        if any(n.startswith("ira.readmodel") for n in ira_imports(path)):
            assert package in READERS, f"{path.relative_to(ROOT)} imports the read model"


def test_no_run_event_type_is_spelled_as_a_string() -> None:
    from ira.core.events import RunEventType

    spelled = {m.value for m in RunEventType}
    for path in ROOT.rglob("*.py"):
        if path.name == "events.py" and path.parent.name == "core":
            continue
        literals = {n.value for n in ast.walk(ast.parse(path.read_text()))
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not literals & spelled, f"{path.relative_to(ROOT)} spells {sorted(literals & spelled)}"
