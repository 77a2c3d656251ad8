"""What a constrained request asks for: one JSON schema, any JSON object, a
regex, a choice of strings, or a grammar (Lark or GBNF).

A plain frozen dataclass inside SamplingParams, so it crosses the engine-core
boundary (msgspec) unchanged; it turns into a grammar for the grammar engine
(llguidance, structured/grammar.py) only where a matcher is built. The field
names are vLLM's ``structured_outputs`` ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tokenmill.errors import RequestError

KINDS = ("json", "json_object", "regex", "choice", "grammar")


@dataclass(frozen=True)
class StructuredOutputsParams:
    json: str | None = None
    """A JSON schema as JSON text (a dict is serialized on construction): the
    output is one JSON value valid under it."""
    json_object: bool = False
    """Any JSON object (OpenAI's ``response_format: {"type": "json_object"}``)."""
    regex: str | None = None
    """The output matches this regular expression (Rust ``regex`` syntax), whole."""
    choice: tuple[str, ...] | None = None
    """The output is exactly one of these strings."""
    grammar: str | None = None
    """A context-free grammar, Lark or GBNF (llama.cpp's) syntax."""

    def __post_init__(self) -> None:
        if isinstance(self.json, dict):
            object.__setattr__(self, "json", json.dumps(self.json))
        if isinstance(self.choice, list):
            object.__setattr__(self, "choice", tuple(self.choice))
        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise RequestError("structured_outputs", f"set exactly one of {', '.join(KINDS)}; got "
                               f"{', '.join(given) if given else 'none'}")
        self._check_types()

    def _check_types(self) -> None:
        for name in ("json", "regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise RequestError(f"structured_outputs.{name}", f"must be a non-empty string, got {value!r}")
        if not isinstance(self.json_object, bool):
            raise RequestError("structured_outputs.json_object", f"must be a boolean, got {self.json_object!r}")
        if self.choice is not None and (not isinstance(self.choice, tuple) or not self.choice
                                        or not all(isinstance(c, str) and c for c in self.choice)):
            raise RequestError("structured_outputs.choice",
                               f"must be a non-empty list of non-empty strings, got {self.choice!r}")

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) not in (None, False))

    def grammar_text(self) -> str:
        """The llguidance grammar (its JSON form) for this constraint. Raises
        RequestError naming the field when the schema, regex or grammar cannot
        be read; the grammar engine's validation catches what is left."""
        from llguidance import LLMatcher, grammar_from  # the grammar engine: only where a grammar is built

        field = f"structured_outputs.{self.kind}"
        try:
            if self.json is not None:
                schema = json.loads(self.json)
                if not isinstance(schema, (dict, bool)):
                    raise ValueError(f"a JSON schema is an object or a boolean, got {type(schema).__name__}")
                return LLMatcher.grammar_from_json_schema(schema)
            if self.json_object:
                return LLMatcher.grammar_from_json_schema({"type": "object"})
            if self.regex is not None:
                return LLMatcher.grammar_from_regex(self.regex)
            if self.choice is not None:
                return grammar_from("choice", json.dumps(list(self.choice)))
            return grammar_from("grammar", self.grammar)
        except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
            raise RequestError(field, f"invalid {self.kind}: {exc}") from exc
