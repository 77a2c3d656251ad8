"""Render a model's jinja2 chat template the way transformers' apply_chat_template does.

Templates come from model files, so they are untrusted code: they run in jinja's
immutable sandbox, namespaces refuse underscore names, and everything the template
sees is rebuilt from plain JSON-like values. Whitespace settings (trim_blocks,
lstrip_blocks), the ``raise_exception`` / ``strftime_now`` globals and the
non-escaping ``tojson`` filter match transformers, so the rendered text is
byte-identical to the reference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Roles are free-form (templates decide what they accept); these shapes are not.
_CONTENT_TYPES = (str, list)


class ChatTemplate:
    """A template plus the special-token variables it is rendered with. It compiles on
    first use, so a model with a broken template still serves plain completions."""

    def __init__(self, source: str, special_tokens: Mapping[str, str | None]):
        self.source = source
        self.special_tokens = {k: v for k, v in special_tokens.items() if v is not None}
        self._compiled: jinja2.Template | None = None

    def render(self, messages, add_generation_prompt: bool = True, tools=None, **kwargs) -> str:
        if self._compiled is None:
            self._compiled = _compile(self.source)
        chat = validate_messages(messages)
        if tools is not None and not isinstance(tools, list):
            raise ValueError("tools: expected a list of JSON schemas")
        documents = _plain(kwargs.pop("documents", None))
        # Caller kwargs override the special tokens, as in transformers.
        variables = _plain({**self.special_tokens, **kwargs})
        try:
            return self._compiled.render(messages=chat, tools=_plain(tools), documents=documents,
                                         add_generation_prompt=add_generation_prompt, **variables)
        # raise_exception(), sandbox refusals, and TypeErrors from message shapes the
        # template does not expect (content parts where it concatenates strings).
        except (jinja2.TemplateError, TypeError) as exc:
            raise ValueError(f"messages: the chat template rejected the conversation: {exc}") from exc


def validate_messages(messages) -> list[dict]:
    """Plain copies of the messages, with None-valued keys dropped (OpenAI clients send
    ``content: null`` next to tool calls, and templates handle a missing key better)."""
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"messages: expected a list of messages, got {type(messages).__name__}")
    if not messages:
        raise ValueError("messages: the conversation is empty")
    chat = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages: message {i} is a {type(message).__name__}, not an object")
        message = {k: v for k, v in message.items() if v is not None}
        if not isinstance(message.get("role"), str):
            raise ValueError(f"messages: message {i} needs a string 'role'")
        content = message.get("content")
        if content is None and not message.get("tool_calls"):
            raise ValueError(f"messages: message {i} ({message['role']}) needs 'content'")
        if content is not None and not isinstance(content, _CONTENT_TYPES):
            raise ValueError(f"messages: message {i} 'content' must be a string or a list of parts")
        chat.append(_plain(message))
    return chat


@lru_cache(maxsize=16)
def _compile(source: str) -> jinja2.Template:
    """One compiled template per distinct source (tokenizers sharing a template share it)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = _SafeDict()
    env.globals["namespace"] = _SafeNamespace
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"chat template: syntax error at line {exc.lineno}: {exc.message}") from exc


def _raise_exception(message):
    raise jinja2.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # jinja's own tojson HTML-escapes '<', '>', '&' and "'"; prompts must not be escaped.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _SafeDict:
    """``dict(...)`` for templates without exposing the dict type itself."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _SafeNamespace(jinja2.utils.Namespace):
    """``namespace()`` that refuses underscore names (a path to interpreter internals)."""

    def __init__(*args, **kwargs):  # jinja's signature trick, so namespace(self=...) works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _SafeNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _SafeNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot set {name!r} on a namespace")


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` marks assistant text for training masks;
    serving only needs the body rendered, so the tag is accepted and ignored."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _plain(value):
    """Rebuild ``value`` from plain JSON-like types, so the sandbox never sees rich
    objects (pydantic models, numpy scalars) whose methods it cannot vet."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    # Subclasses (str enums, numpy scalars) go back to the base type, dropping their methods.
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):  # before int: bool is an int
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        return _plain(value.item())
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"
