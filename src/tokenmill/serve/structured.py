"""Request fields that constrain the output -> StructuredOutputsParams, checked.

Accepted, one source per request:
- OpenAI's ``response_format``: ``{"type": "json_object"}`` or
  ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``
  (``{"type": "text"}`` constrains nothing);
- vLLM's ``structured_outputs``: ``{"json" | "json_object" | "regex" | "choice" | "grammar": ...}``;
- vLLM's older ``guided_json`` / ``guided_regex`` / ``guided_choice`` / ``guided_grammar``.

The constraint is compiled here, off the event loop, before the request goes to
the engine, so a bad schema, regex or grammar is a 400 naming the client's
field (``response_format.json_schema.schema``), not the engine's.
"""

from __future__ import annotations

import asyncio
import threading

from tokenmill.errors import RequestError
from tokenmill.structured.params import StructuredOutputsParams

GUIDED_FIELDS = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
                 "guided_grammar": "grammar"}
"""vLLM's older extra fields -> the StructuredOutputsParams field each sets."""


def requested_constraint(req) -> tuple[StructuredOutputsParams, str] | None:
    """(the constraint, the client's field it came from), or None. ``req`` is a
    chat or completion request (protocol.py); extra fields are read from it."""
    extra = req.model_extra or {}
    sources = []
    if req.response_format is not None and req.response_format.type != "text":
        sources.append(("response_format", _from_response_format(req.response_format)))
    if req.structured_outputs is not None:
        sources.append(("structured_outputs", _build("structured_outputs", req.structured_outputs)))
    for name, kind in GUIDED_FIELDS.items():
        if extra.get(name) is not None:
            sources.append((name, _build(name, {kind: extra[name]})))
    if len(sources) > 1:
        raise RequestError(sources[1][0], f"only one output constraint per request; {sources[0][0]!r} is set too")
    if not sources:
        return None
    return sources[0][1]


def _from_response_format(fmt) -> tuple[StructuredOutputsParams, str]:
    if fmt.type == "json_object":
        return StructuredOutputsParams(json_object=True), "response_format"
    if fmt.json_schema is None:
        raise RequestError("response_format.json_schema", "required when type is 'json_schema'")
    schema = fmt.json_schema.schema_
    if schema is None:
        raise RequestError("response_format.json_schema.schema", "required when type is 'json_schema'")
    return _build("response_format.json_schema.schema", {"json": schema})


def _build(field: str, values: dict) -> tuple[StructuredOutputsParams, str]:
    """StructuredOutputsParams(**values), its errors renamed onto ``field``."""
    if not isinstance(values, dict):
        raise RequestError(field, f"must be an object, got {type(values).__name__}")
    unknown = sorted(set(values) - set(StructuredOutputsParams.__dataclass_fields__))
    if unknown:
        raise RequestError(f"{field}.{unknown[0]}", "unknown structured output field")
    if isinstance(values.get("json"), bool):
        raise RequestError(field, "a boolean JSON schema is not supported; give an object schema")
    try:
        return StructuredOutputsParams(**values), field
    except RequestError as exc:
        raise RequestError(_client_field(field, exc.param), exc.message) from exc


def _client_field(field: str, engine_param: str | None) -> str:
    """'structured_outputs.regex' from the engine -> the field the client wrote."""
    if field.startswith("structured_outputs") and engine_param:
        return engine_param
    return field


class ConstraintChecker:
    """Compiles constraints against the served vocabulary (one grammar engine,
    built on first use, ~0.5 s) so a bad one is refused before it reaches the engine."""

    def __init__(self, tokenizer, vocab_size: int | None = None):
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._engine = None
        self._lock = threading.Lock()

    def _grammar_engine(self):
        with self._lock:
            if self._engine is None:
                from tokenmill.structured.grammar import GrammarEngine
                self._engine = GrammarEngine(self._tokenizer, self._vocab_size)
            return self._engine

    async def check(self, params: StructuredOutputsParams, field: str) -> None:
        if self._tokenizer is None:
            raise RequestError(field, "this model has no tokenizer (dummy weights): structured outputs need one")
        try:
            await asyncio.to_thread(lambda: self._grammar_engine().grammar(params))
        except RequestError as exc:
            raise RequestError(_client_field(field, exc.param), exc.message) from exc
