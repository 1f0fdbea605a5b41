"""Token substitution over loaded YAML: `${token}`, legacy `{token}`, and `${secret:scope/key}`.

Tokens come from `<config_dir>/substitutions/<env>.yaml`: its `global:` block, overridden by its
`<env>:` block (the reference's layout). Token values may refer to other tokens and to built-ins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quarantine_assets.codes import BUILTIN_TOKEN_SHADOWED, SECRET_UNSET, STRUCTURE, UNKNOWN_TOKEN
from quarantine_assets.config.reference_keys import substitutions_warnings
from quarantine_assets.config.yaml_files import child, read_yaml
from quarantine_assets.errors import Problem

# `${...}` is tried first, so the braces inside it are never read as a legacy `{token}`.
_REFERENCE = re.compile(r"\$\{(?P<braced>[^}]*)\}|\{(?P<legacy>\w+)\}")
_SECRET_PREFIX = "secret:"
_REDACTED = "***"

Lookup = Callable[[str], str | None]
Failure = tuple[str, str]  # (code, message), located by the caller


_VARIABLE = re.compile(r"%\{(\w+)\}")


def apply_variables(flowgroup: dict[str, Any], file: Path) -> tuple[dict[str, Any], list[Problem]]:
    """The flowgroup's own `variables`, written `%{name}` in its values (the reference's syntax)."""
    variables = flowgroup.get("variables") or {}
    if not isinstance(variables, dict):
        return flowgroup, [Problem(STRUCTURE, "variables must map names to values", file=file, field="variables")]
    problems: list[Problem] = []

    def walk(node: Any, field: str) -> Any:
        if isinstance(node, str):

            def replace(match: re.Match[str]) -> str:
                if match[1] in variables:
                    return str(variables[match[1]])
                problems.append(Problem(UNKNOWN_TOKEN, f"unknown variable %{{{match[1]}}}", file=file, field=field))
                return match[0]

            return _VARIABLE.sub(replace, node)
        if isinstance(node, dict):
            return {key: walk(value, child(field, key)) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(item, child(field, index)) for index, item in enumerate(node)]
        return node

    return walk(flowgroup, ""), problems


def secret_env_var(scope: str, key: str) -> str:
    """`${secret:ops/api-key}` is read from QUARANTINE_SECRET_OPS_API_KEY."""
    return "QUARANTINE_SECRET_" + re.sub(r"[^A-Z0-9]", "_", f"{scope}_{key}".upper())


@dataclass(frozen=True)
class SecretScopes:
    """The reference's `secrets:` block: the scope of `${secret:key}`, and aliases of scope names."""

    default: str | None = None
    aliases: dict[str, str] = field(default_factory=dict)


class Substitutions:
    """Resolved tokens for one environment. Remembers every secret it hands out so messages can hide them."""

    def __init__(self, file: Path, env: str, secret_scopes: SecretScopes | None = None):
        self.file = file
        self.env = env
        self.tokens: dict[str, str] = {}
        self.secret_scopes = secret_scopes or SecretScopes()
        self._secret_values: set[str] = set()

    def apply(self, data: Any, *, file: Path) -> tuple[Any, list[Problem]]:
        """Substitute every string value in `data`; problems are located in `file` by field path."""
        problems: list[Problem] = []

        def walk(node: Any, field: str) -> Any:
            if isinstance(node, str):
                text, failures = self._substitute(node, self.tokens.get)
                problems.extend(Problem(code, message, file=file, field=field or None) for code, message in failures)
                return text
            if isinstance(node, dict):
                return {key: walk(value, child(field, key)) for key, value in node.items()}
            if isinstance(node, list):
                return [walk(item, child(field, index)) for index, item in enumerate(node)]
            return node

        return walk(data, ""), problems

    def redact(self, text: str) -> str:
        for secret in self._secret_values:
            text = text.replace(secret, _REDACTED)
        return text

    def _substitute(self, text: str, lookup: Lookup) -> tuple[str, list[Failure]]:
        failures: list[Failure] = []

        def replace(match: re.Match[str]) -> str:
            legacy = match["legacy"]
            if legacy is not None:
                # Legacy braces also occur in plain text (regex quantifiers, JSON), so only known tokens count.
                value = lookup(legacy)
                return match[0] if value is None else value
            reference = match["braced"]
            if reference.startswith(_SECRET_PREFIX):
                return self._secret(reference.removeprefix(_SECRET_PREFIX), failures) or match[0]
            value = lookup(reference)
            if value is None:
                failures.append(
                    (UNKNOWN_TOKEN, f"unknown token ${{{reference}}}: define it under '{self.env}:' in {self.file}")
                )
                return match[0]
            return value

        return _REFERENCE.sub(replace, text), failures

    def _secret(self, reference: str, failures: list[Failure]) -> str | None:
        scope, slash, key = (
            reference.partition("/") if "/" in reference else (self.secret_scopes.default, "/", reference)
        )
        if not (scope and slash and key):
            failures.append(
                (
                    SECRET_UNSET,
                    f"secret reference ${{secret:{reference}}} must be ${{secret:scope/key}}, or "
                    f"${{secret:key}} with secrets.default_scope set in {self.file}",
                )
            )
            return None
        scope = self.secret_scopes.aliases.get(scope, scope)
        variable = secret_env_var(scope, key)
        value = os.environ.get(variable)
        if not value:
            failures.append((SECRET_UNSET, f"secret {scope}/{key} is not set: export {variable}"))
            return None
        self._secret_values.add(value)
        return value

    def define(self, builtins: dict[str, str], raw: dict[str, tuple[str, str]]) -> list[Problem]:
        """Take built-ins as they are and expand the file's token values, reporting cycles instead of looping."""
        problems: list[Problem] = []
        self.tokens = dict(builtins)

        def resolve(name: str, chain: tuple[str, ...]) -> str:
            if name in self.tokens:
                return self.tokens[name]
            field, value = raw[name]
            if name in chain:
                cycle = " -> ".join(chain[chain.index(name) :] + (name,))
                problems.append(Problem(UNKNOWN_TOKEN, f"token refers to itself: {cycle}", file=self.file, field=field))
                self.tokens[name] = value  # breaks the cycle, so it is reported once
                return value
            text, failures = self._substitute(
                value, lambda token: resolve(token, chain + (name,)) if token in known else None
            )
            problems.extend(Problem(code, message, file=self.file, field=field) for code, message in failures)
            return self.tokens.setdefault(name, text)

        known = raw.keys() | self.tokens.keys()
        for name in raw:
            resolve(name, ())
        return problems


def load_substitutions(config_dir: Path, env: str, warehouse: str | os.PathLike) -> tuple[Substitutions, list[Problem]]:
    """Read `substitutions/<env>.yaml` (optional) and resolve token values that refer to other tokens."""
    file = config_dir / "substitutions" / f"{env}.yaml"
    builtins = {"warehouse": os.fspath(warehouse)}
    raw, scopes, problems = _raw_tokens(file, env) if file.exists() else ({}, SecretScopes(), [])
    for name in builtins.keys() & raw.keys():
        problems.append(
            Problem(
                BUILTIN_TOKEN_SHADOWED,
                f"token {name!r} is built in (the warehouse root the engine writes to); this value is ignored",
                file=file,
                field=raw[name][0],
                severity="warning",
            )
        )
        del raw[name]
    substitutions = Substitutions(file, env, scopes)
    problems += substitutions.define(builtins, raw)
    return substitutions, problems


def _raw_tokens(file: Path, env: str) -> tuple[dict[str, tuple[str, str]], SecretScopes, list[Problem]]:
    """Token name -> (field it was read from, unexpanded value); the secrets block."""
    data, problem = read_yaml(file)
    if problem:
        return {}, SecretScopes(), [problem]
    tokens: dict[str, tuple[str, str]] = {}
    problems: list[Problem] = substitutions_warnings(data, file)
    scopes, scope_problems = _secret_scopes(data.get("secrets"), file)
    problems += scope_problems
    for section in ("global", env):  # later sections override earlier ones
        block = data.get(section) or {}
        if not isinstance(block, dict):
            problems.append(Problem(STRUCTURE, f"{section!r} must map token names to values", file=file, field=section))
            continue
        for name, value in block.items():
            field = child(section, name)
            if isinstance(value, (dict, list)) or value is None:
                problems.append(Problem(STRUCTURE, f"token {name!r} must be a single value", file=file, field=field))
            else:
                tokens[str(name)] = (field, str(value).lower() if isinstance(value, bool) else str(value))
    return tokens, scopes, problems


def _secret_scopes(block: Any, file: Path) -> tuple[SecretScopes, list[Problem]]:
    if block is None:
        return SecretScopes(), []
    aliases = block.get("scopes", {}) if isinstance(block, dict) else None
    if not isinstance(aliases, dict) or not isinstance(block.get("default_scope", ""), str):
        message = "secrets needs default_scope (a scope name) and scopes (alias: scope)"
        return SecretScopes(), [Problem(STRUCTURE, message, file=file, field="secrets")]
    return SecretScopes(block.get("default_scope"), {str(k): str(v) for k, v in aliases.items()}), []
