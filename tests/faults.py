"""A fault injected where the engine calls a function: it stands for a kill of the step at that point."""

from __future__ import annotations


class Killed(RuntimeError):
    """Stands for a kill of the step at the point where it is raised."""


def kill_once(monkeypatch, module, name: str):
    """Raise `Killed` at the first call of `module.name`, before it runs."""
    original = getattr(module, name)
    calls = []

    def killed(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise Killed(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, killed)
