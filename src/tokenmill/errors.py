"""Errors the engine raises at its edge."""

from __future__ import annotations


class RequestError(ValueError):
    """A request that cannot be served; ``param`` names the offending field."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message
        """The explanation without the field name."""


class QueueFullError(RuntimeError):
    """The engine's waiting queue is at ``max_waiting_requests``."""


class EngineUnavailableError(RuntimeError):
    """No engine can take the request now (every cluster worker is down)."""
