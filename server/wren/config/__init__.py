"""Configuration: documented defaults, overridden by a TOML file, overridden by environment variables.

Every option lives in a section dataclass (`wren.config.sections`). The TOML file uses the same names
(`[server] port = 8000`), and every option is also settable as `WREN_<SECTION>_<OPTION>`
(`WREN_SERVER_PORT=9000`). Environment values are parsed as the field's type (bool accepts
1/0/true/false/yes/no; lists are comma-separated). Unknown keys in the file are an error, so a typo
never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import os
import tomllib
import typing
from pathlib import Path

from wren.config.sections import (
    AgentConfig,
    ApiConfig,
    AsrConfig,
    AudioConfig,
    AuthConfig,
    Config,
    ConfigError,
    ConsoleConfig,
    LimitsConfig,
    McpConfig,
    ServerConfig,
    StoreConfig,
    TtsConfig,
    VadConfig,
    default_data_dir,
)

__all__ = [
    "CHOICES",
    "AgentConfig",
    "ApiConfig",
    "AsrConfig",
    "AudioConfig",
    "AuthConfig",
    "Config",
    "ConfigError",
    "ConsoleConfig",
    "LimitsConfig",
    "McpConfig",
    "ServerConfig",
    "StoreConfig",
    "TtsConfig",
    "VadConfig",
    "check_choices",
    "config_path",
    "default_data_dir",
    "env_name",
    "load_config",
    "package_version",
]


# Options with a fixed set of values: checked when the configuration is loaded (compared case-insensitively,
# kept lower-case), so a typo is one clear line before any model is loaded. The loaders check again.
CHOICES: dict[str, tuple[str, ...]] = {
    "auth.mode": ("pair", "token", "open"),
    "audio.downlink_format": ("opus", "pcm"),
    "vad.engine": ("silero", "webrtc"),
    "asr.engine": ("moonshine", "pocketsphinx", "vosk", "wyoming"),
    "asr.bias": ("auto", "strong", "weak", "off"),
    "tts.engine": ("piper", "wyoming"),
    "agent.engine": ("builtin", "openai", "ovos", "homeassistant"),
}
_TYPE_NAMES: dict[object, str] = {int: "an integer", float: "a number", bool: "a boolean", str: "a string"}


def package_version() -> str:
    """The installed package's version (`wren --version`, `/metrics`, the console); from pyproject.toml
    when running from a source tree that was never installed."""
    try:
        return importlib.metadata.version("wren")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        pyproject = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())
        return str(pyproject["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def env_name(section: str, option: str) -> str:
    return f"WREN_{section.upper()}_{option.upper()}"


def _coerce(value: object, typ: object, name: str, text: bool) -> object:
    """`value` as the option's type. `text`: it came from the environment (a string to parse); else from
    TOML, whose values must already have the option's type (an integer is a number too)."""
    if typing.get_origin(typ) is list:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ConfigError(f"{name}: expected a list of strings, got {value!r}")
    if isinstance(value, bool):
        if typ is bool:
            return value
    elif typ is bool:
        word = str(value).strip().lower() if text else None
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
    elif typ in (int, float):
        if isinstance(value, int) or (typ is float and isinstance(value, float)):
            return typ(value)
        if text:
            try:
                return typ(str(value).strip())
            except ValueError:
                pass
    elif isinstance(value, str):
        return value
    raise ConfigError(f"{name}: expected {_TYPE_NAMES.get(typ, typ)}, got {value!r}")


def _apply(section: object, section_name: str, values: dict, source: str | None) -> None:
    """Set `values` on `section`; `source` is the TOML file's path, None for the environment."""
    hints = typing.get_type_hints(type(section))
    for key, value in values.items():
        where = source if source is not None else env_name(section_name, key)
        if key not in hints:
            close = difflib.get_close_matches(key, list(hints), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"{where}: unknown option [{section_name}] {key}{hint}")
        name = f"{where}: {section_name}.{key}"
        setattr(section, key, _coerce(value, hints[key], name, text=source is None))


def check_choices(config: Config) -> None:
    """Options with a fixed set of values (CHOICES) hold one of them (stored lower-case)."""
    for dotted, allowed in CHOICES.items():
        section_name, _, key = dotted.partition(".")
        section = getattr(config, section_name)
        value = str(getattr(section, key)).strip().lower()
        if value not in allowed:
            raise ConfigError(
                f"{dotted} must be {', '.join(allowed[:-1]) + ' or ' if len(allowed) > 1 else ''}"
                f"{allowed[-1]} (got {getattr(section, key)!r})"
            )
        setattr(section, key, value)
    if not 0 <= config.server.port <= 65535:
        raise ConfigError(f"server.port must be 0..65535 (got {config.server.port})")
    url = config.store.url.strip()
    if url and not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"store.url must be empty (SQLite) or redis://, rediss:// or unix:// (got {url!r})")
    config.store.url = url
    if config.store.lease_s < 1:
        raise ConfigError(f"store.lease_s must be at least 1 second (got {config.store.lease_s})")
    if not 0 < config.server.gil_switch_interval_ms <= 1000:
        raise ConfigError("server.gil_switch_interval_ms must be above 0 and at most 1000 "
                          f"(got {config.server.gil_switch_interval_ms})")
    if not 0 <= config.tts.nice <= 19:
        raise ConfigError(f"tts.nice must be 0..19 (0 = the server's own priority; got {config.tts.nice})")


def config_path(path: str | os.PathLike | None, env: typing.Mapping[str, str]) -> str | None:
    """The TOML file to read: `path` (--config), else $WREN_CONFIG, else none."""
    found = path or env.get("WREN_CONFIG") or None
    return str(found) if found else None


def load_config(path: str | os.PathLike | None = None, env: typing.Mapping[str, str] | None = None) -> Config:
    """Defaults, then the TOML file (if any), then WREN_<SECTION>_<OPTION> environment variables.
    Any mistake (a file that is missing or not TOML, an unknown section or option, a value of the wrong
    type, an engine Wren does not have) is a ConfigError whose one-line message names it."""
    env = os.environ if env is None else env
    config = Config()
    config.server.data_dir = default_data_dir(env)
    path = config_path(path, env)
    if path:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        for name, values in data.items():
            if not hasattr(config, name) or not dataclasses.is_dataclass(getattr(config, name)):
                sections = ", ".join(f.name for f in dataclasses.fields(config))
                raise ConfigError(f"{path}: unknown section [{name}] (sections: {sections})")
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: {name} must be a table ([{name}] with options under it)")
            _apply(getattr(config, name), name, values, str(path))
    for f in dataclasses.fields(config):
        section = getattr(config, f.name)
        prefix = f"WREN_{f.name.upper()}_"
        values = {k[len(prefix) :].lower(): v for k, v in env.items() if k.startswith(prefix)}
        _apply(section, f.name, values, None)
    data_dir = config.server.data_dir.strip()
    config.server.data_dir = str(Path(data_dir).expanduser()) if data_dir else default_data_dir(env)
    check_choices(config)
    return config
