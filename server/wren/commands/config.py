"""Print every option with its current value, its default and its comment, as TOML.

The current value is what `wren serve` would use: defaults, then --config FILE (or $WREN_CONFIG), then the
WREN_<SECTION>_<OPTION> environment variables; each option that is not at its default says where it was
set. The output is a valid config file (`wren config > wren.toml`); a secret that is set is shown
commented out unless --show-secrets.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import os
import sys
import tokenize
from collections.abc import Mapping
from pathlib import Path

import wren.config.sections as config_module
from wren.config import Config, ConfigError, config_path, env_name, load_config, package_version


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (default: $WREN_CONFIG, else built-in defaults)")
    parser.add_argument("--show-secrets", action="store_true", help="print secrets that are set, too")


def is_secret(option: str) -> bool:
    return option in ("secret", "key") or option.endswith(("_key", "_secret", "password", "token"))


def option_comments() -> dict[str, dict[str, list[str]]]:
    """Each section class's field comments in config/sections.py: the comment block right above the field
    and the comments on its own lines, by class name and field name."""
    source = Path(config_module.__file__).read_text()
    lines = source.splitlines()
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = {t.start[0]: t.string.lstrip("#").strip() for t in tokens if t.type == tokenize.COMMENT}
    found: dict[str, dict[str, list[str]]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields = found.setdefault(node.name, {})
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            above = []
            number = item.lineno - 1
            while number >= 1 and lines[number - 1].lstrip().startswith("#"):
                above.insert(0, comments.get(number, ""))
                number -= 1
            span = range(item.lineno, (item.end_lineno or item.lineno) + 1)
            own = [comments[n] for n in span if n in comments]
            fields[item.target.id] = [c for c in above + own if c]
    return found


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # JSON's escapes are TOML basic-string escapes


def render(path: str | None, env: Mapping[str, str], show_secrets: bool = False) -> str:
    current = load_config(path, env)
    # The same environment without the option variables: defaults may depend on it (data_dir on $HOME).
    prefixes = tuple(f"WREN_{f.name.upper()}_" for f in dataclasses.fields(Config))
    plain = {k: v for k, v in env.items() if not k.startswith(prefixes) and k != "WREN_CONFIG"}
    defaults = load_config(None, plain)
    from_file = load_config(path, plain) if path else defaults
    comments = option_comments()
    out = [f"# Wren {package_version()}: every option, as `wren serve` would use it.",
           f"# Sources: defaults, then {path or 'no config file'}, then WREN_<SECTION>_<OPTION> variables."]
    for section_field in dataclasses.fields(current):
        name = section_field.name
        section = getattr(current, name)
        out += ["", f"[{name}]"]
        notes = comments.get(type(section).__name__, {})
        for option in dataclasses.fields(section):
            key = option.name
            value = getattr(section, key)
            default = getattr(getattr(defaults, name), key)
            out += [f"# {line}" for line in notes.get(key, [])]
            variable = env_name(name, key)
            if variable in env:
                where = f"default {toml_value(default)}, set by {variable}"
            elif value != default or getattr(getattr(from_file, name), key) != default:
                where = f"default {toml_value(default)}, set in {path}"
            else:
                where = "default"
            if is_secret(key) and value and not show_secrets:
                out.append(f"# {key} = (set, hidden: --show-secrets prints it)  # {where}")
            else:
                out.append(f"{key} = {toml_value(value)}  # {where}")
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    try:
        text = render(config_path(args.config, os.environ), os.environ, args.show_secrets)
    except ConfigError as exc:
        print(f"wren config: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0
