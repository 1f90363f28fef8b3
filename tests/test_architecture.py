"""The layout is the architecture: every import of the package follows docs/architecture.md's table.

Walks every module of benchc/ and csrc/ (imports inside functions and Cython cimports
included), so a lazy import cannot hide a dependency the table does not allow.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

ROOT = Path(REPO)
BASE = {"errors", "units", "redact", "inputs", "_core", "catalog", "__init__"}
TOP = {"cli", "__main__"}
# package -> the packages it may import (docs/architecture.md's "may import" column); base is always allowed
ALLOWED = {
    "spec": set(),
    "tokenizer": set(),
    "metrics": set(),
    "plan": {"spec", "tokenizer"},
    "client": {"metrics", "plan"},
    "sim": {"plan", "tokenizer"},
    "results": {"spec", "metrics", "plan"},
    "run": {"spec", "tokenizer", "plan", "metrics", "client", "results"},
}
_CIMPORT = re.compile(r"^\s*(?:from\s+(benchc[\w.]*)\s+c?import\s+([\w, ]+)|c?import\s+(benchc[\w.]*))", re.M)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "csrc":
        parts[0] = "benchc"
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def sources() -> list[Path]:
    return sorted(p for d in ("benchc", "csrc") for ext in ("*.py", "*.pyx", "*.pxd")
                  for p in (ROOT / d).rglob(ext))


MODULES = {module_name(p) for p in sources()}


def resolve(module: str, names: list[str]) -> list[str]:
    """`from module import names`: a name that is itself a module counts as that module."""
    out = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
    return out if len(out) == len(names) else out + [module]


def imports_of(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    found: set[str] = set()
    if path.suffix == ".py":
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchc"):
                found.update(resolve(node.module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("benchc"))
    else:
        for frm, names, plain in _CIMPORT.findall(text):
            if frm:
                found.update(resolve(frm, [n.strip() for n in names.split(",") if n.strip()]))
            else:
                found.add(plain)
    return found


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for p in sources():
        g.setdefault(module_name(p), set()).update(imports_of(p))
    return g


def test_every_import_is_one_the_architecture_allows():
    bad = []
    for mod, deps in graph().items():
        src = stage(mod)
        if src in BASE or src in TOP:
            if src in BASE:
                bad += [f"{mod} -> {d}" for d in deps if stage(d) not in BASE]
            continue
        assert src in ALLOWED, f"{src}/ is not in docs/architecture.md's table"
        bad += [f"{mod} -> {d}" for d in deps if stage(d) not in BASE | {src} | ALLOWED[src]]
    assert not bad, "imports the architecture does not allow:\n" + "\n".join(sorted(bad))


def test_no_import_cycle():
    g = graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(g.get(m, ())):
            if d == m or d.startswith(m + ".") or m.startswith(d + "."):
                continue  # a package and its own submodules (an __init__ re-exporting them)
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(d):] + [d]))
            if d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_the_readme_table_lists_every_package_and_its_imports():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc[doc.index("# Architecture"):]
    rows = re.findall(r"^\| `benchc/(\w+)/` \| .* \| ([\w, ]+) \|$", section, re.M)
    table = {pkg: {x.strip() for x in deps.split(",")} - {"base"} for pkg, deps in rows}
    packages = {p.parent.name for p in (ROOT / "benchc").glob("*/__init__.py")}
    assert table == ALLOWED
    assert set(table) == packages
