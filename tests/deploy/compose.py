"""Reading the compose files as `docker compose` would: interpolation and overlay merging.

There is no Docker engine or compose plugin on the machines that run these tests, so this
module implements the two parts of the Compose Specification the checks need:
interpolation (``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
``${VAR:?message}``, ``${VAR?message}``, ``${VAR:+alt}``, ``${VAR+alt}``, ``$$``) and the
merge of an overlay file (mappings merged key by key; ``command`` and other sequences
replaced, except ``ports``, ``volumes`` and ``expose``, which are appended).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
COMPOSE_AUTH = DOCKER / "docker-compose.auth.yml"

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)
_APPENDED = {"ports", "volumes", "expose"}


class InterpolationError(ValueError):
    """A required variable (``${VAR:?message}``) is missing; the message is compose's."""


def load(path: Path) -> dict[str, Any]:
    """The YAML of a compose file, uninterpolated."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path} is not a mapping"
    return data


def _substitute(text: str, env: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["bare"]
        op, arg = match["op"], match["arg"] or ""
        value = env.get(name)
        unset_or_empty = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in (":-", "-"):
            return arg if unset_or_empty else str(value)
        if op in (":?", "?"):
            if unset_or_empty:
                raise InterpolationError(f"required variable {name} is missing a value: {arg}")
            return str(value)
        if op in (":+", "+"):
            return "" if unset_or_empty else arg
        return value or ""

    return _VARIABLE.sub(replace, text)


def interpolate(node: Any, env: Mapping[str, str]) -> Any:
    """`node` with every string's variables substituted from `env`."""
    if isinstance(node, str):
        return _substitute(node, env)
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    return node


def variables(node: Any) -> set[str]:
    """Names of every variable `node` refers to."""
    if isinstance(node, str):
        return {m["braced"] or m["bare"] for m in _VARIABLE.finditer(node) if not m["escaped"]}
    if isinstance(node, list):
        return set().union(*(variables(item) for item in node)) if node else set()
    if isinstance(node, dict):
        return set().union(*(variables(value) for value in node.values())) if node else set()
    return set()


def merge(base: Any, overlay: Any, key: str = "") -> Any:
    """`overlay` merged onto `base` as compose merges ``-f base -f overlay``."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = dict(base)
        for name, value in overlay.items():
            merged[name] = merge(base[name], value, name) if name in base else value
        return merged
    if isinstance(base, list) and isinstance(overlay, list) and key in _APPENDED:
        return [*base, *overlay]
    return overlay


def resolved(env: Mapping[str, str], *, auth: bool = False) -> dict[str, Any]:
    """The effective model of the stack (with the auth overlay when `auth`)."""
    model = load(COMPOSE)
    if auth:
        model = merge(model, load(COMPOSE_AUTH))
    resolved_model: dict[str, Any] = interpolate(model, env)
    return resolved_model


def compose_schema() -> dict[str, Any]:
    """The Compose Specification's JSON schema, as vendored by the check-jsonschema package."""
    files = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads(files.joinpath("compose-spec.json").read_text(encoding="utf-8"))
    return schema
