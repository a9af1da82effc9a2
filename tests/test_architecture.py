"""The structure rules of docs/architecture.md, checked on the source: no import cycles in server/, small
modules, and every queue bounded with a named overflow policy."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "server"
FIRMWARE = ROOT / "firmware"
MAX_SERVER_LINES = 400
MAX_FIRMWARE_LINES = 300


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of `known` this file imports, anywhere in it (TYPE_CHECKING blocks and function-local
    imports count too: a cycle hidden behind them is still a cycle in the design)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    resolved = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_between_server_modules():
    modules = _modules(SERVER)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []


def test_shared_protocol_imports_nobody_outside_itself():
    for path in (ROOT / "shared_protocol").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level:
                assert not (node.module or "").startswith(("wren", "wren_device")), path
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("wren") for a in node.names), path


def _too_long(root: Path, limit: int) -> dict[str, int]:
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    return {path: n for path, n in lengths.items() if n > limit}


def test_server_modules_stay_small():
    assert _too_long(SERVER, MAX_SERVER_LINES) == {}


def test_firmware_modules_stay_small():
    assert _too_long(FIRMWARE, MAX_FIRMWARE_LINES) == {}


QUEUE_CALL = re.compile(r"\b(asyncio\.Queue|queue\.Queue|SimpleQueue|deque)\(")
POLICY_WORDS = re.compile(r"bound|overflow|policy|maxlen|at most", re.IGNORECASE)


def test_every_server_queue_is_bounded_or_names_its_policy():
    """A queue constructor either takes its bound (maxsize / maxlen / a capacity argument) or says, in a
    comment on its line or the comment block above it, what bounds it and what happens on overflow."""
    unbounded = []
    for path in SERVER.rglob("*.py"):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            match = QUEUE_CALL.search(line)
            if match is None or line.lstrip().startswith("#"):
                continue
            argument = line[match.end():].split(")")[0].strip()
            if match.group(1) == "deque":
                has_bound = "maxlen" in line
            else:
                has_bound = "maxsize" in line or (argument != "" and not argument.startswith("*"))
            comment = line.partition("#")[2]
            above = number - 1
            while above >= 0 and lines[above].lstrip().startswith("#"):  # the comment block over it
                comment += lines[above]
                above -= 1
            if not has_bound and not POLICY_WORDS.search(comment):
                unbounded.append(f"{path.relative_to(ROOT)}:{number + 1}: {line.strip()}")
    assert unbounded == []


# Lower layers never import higher ones (docs/architecture.md, "Dependencies").
LAYERS = {
    "wren.config": 0,
    "wren.privacy": 0,
    "wren.speech": 1,
    "wren.store": 1,
    "wren.tools": 1,
    "wren.agent": 2,
    "wren.pipeline": 2,
    "wren.session": 3,
    "wren.transport": 4,
    "wren.app": 5,
    "wren.commands": 6,
    "wren.cli": 7,
}


def test_server_packages_depend_one_way_down_the_layers():
    modules = _modules(SERVER)
    upward = []
    for name, path in modules.items():
        if name == "wren":
            continue
        layer = ".".join(name.split(".")[:2])
        for target in _imports(name, path, modules):
            target_layer = ".".join(target.split(".")[:2])
            if target_layer != layer and LAYERS[target_layer] >= LAYERS[layer]:
                upward.append(f"{name} → {target}")
    assert upward == []
