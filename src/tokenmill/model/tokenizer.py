"""Tokenizer: text <-> token ids, built on the ``tokenizers`` library.

Two sources: a GGUF file (vocabulary, merges and flags in its metadata, read the
way llama.cpp reads them) or a Hugging Face folder (tokenizer.json and friends).
Either way the result is one ``tokenizers.Tokenizer`` plus the facts serving needs:
special ids, end-of-generation ids, the chat template. transformers is a test
reference only, never imported here.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers

from tokenmill.model.chat_template import ChatTemplate

log = logging.getLogger(__name__)

# GGUF token types (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Tokens that end generation besides eos (as llama.cpp's end-of-generation set). An
# end-of-turn token counts when the chat template writes it (Llama-3 files may name
# <|end_of_text|> as eos while turns end in <|eot_id|>); an end-of-document token always
# counts when it is a special token: nothing meaningful follows it.
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>")
_END_OF_DOCUMENT = ("<|endoftext|>", "<|end_of_text|>")

_TEMPLATE_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")
_GGUF_SPECIAL_KEYS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                      "unk_token": "unknown_token_id", "pad_token": "padding_token_id"}


class Tokenizer:
    def __init__(self, backend: tokenizers.Tokenizer, *, name_or_path: str, special_tokens: dict[str, str | None],
                 chat_template: str | None = None, add_bos_eos: tuple[bool, bool] | None = None,
                 extra_eos_ids=()):
        """``special_tokens``: bos/eos/unk/pad token text. ``add_bos_eos``: what encode adds;
        None leaves it to the backend's own post-processor (a tokenizer.json that has one)."""
        self._backend = backend
        self.name_or_path = name_or_path
        self.special_tokens = {k: v for k, v in special_tokens.items() if v is not None}
        self._add_bos_eos = add_bos_eos
        self.bos_token_id = self._id_of(self.special_tokens.get("bos_token"))
        self.eos_token_id = self._id_of(self.special_tokens.get("eos_token"))
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        # Exactly the ids decode(skip_special_tokens=True) drops.
        self.all_special_ids = frozenset(i for i, t in backend.get_added_tokens_decoder().items() if t.special)
        self.chat_template = chat_template
        self._template = ChatTemplate(chat_template, self.special_tokens) if chat_template else None
        self.eos_token_ids = frozenset(self._end_of_generation_ids(extra_eos_ids))

    # --- construction ---------------------------------------------------------------

    @classmethod
    def from_gguf(cls, path) -> Tokenizer:
        fields = read_gguf_tokenizer_fields(path)
        kind = fields.get("tokenizer.ggml.model")
        builders = {"gpt2": _byte_level_backend, "llama": _sentencepiece_backend}
        if kind not in builders:
            raise ValueError(f"tokenizer: GGUF tokenizer model {kind!r} is not supported "
                             f"(supported: {sorted(builders)})")
        tokens = fields["tokenizer.ggml.tokens"]
        types = _token_types(fields)
        backend = builders[kind](fields, types)
        _add_gguf_added_tokens(backend, tokens, types)
        special = {name: _gguf_token(fields, key) for name, key in _GGUF_SPECIAL_KEYS.items()}
        # llama.cpp adds BOS to a sentencepiece vocabulary unless the file says otherwise.
        add_bos = bool(fields.get("tokenizer.ggml.add_bos_token", kind == "llama"))
        add_eos = bool(fields.get("tokenizer.ggml.add_eos_token", False))
        extra_eos = [fields[k] for k in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id") if k in fields]
        return cls(backend, name_or_path=str(path), special_tokens=special,
                   chat_template=fields.get("tokenizer.chat_template"), add_bos_eos=(add_bos, add_eos),
                   extra_eos_ids=extra_eos)

    @classmethod
    def from_hf_dir(cls, path) -> Tokenizer:
        root = Path(path)
        file = root / "tokenizer.json"
        if not file.is_file():
            raise FileNotFoundError(f"tokenizer: no tokenizer.json in {root}")
        backend = tokenizers.Tokenizer.from_file(str(file))
        config = _read_json(root / "tokenizer_config.json")
        generation = _read_json(root / "generation_config.json")
        special = {name: _token_text(config.get(name)) for name in _TEMPLATE_TOKENS}
        for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id")):
            if special[name] is None and _as_ids(generation.get(key)):
                special[name] = backend.id_to_token(_as_ids(generation.get(key))[0])
        # Like transformers: explicit flags in the config replace tokenizer.json's post-processor.
        add = None
        if "add_bos_token" in config or "add_eos_token" in config:
            add = (bool(config.get("add_bos_token")), bool(config.get("add_eos_token")))
        return cls(backend, name_or_path=str(root), special_tokens=special,
                   chat_template=_hf_chat_template(root, config), add_bos_eos=add,
                   extra_eos_ids=_as_ids(generation.get("eos_token_id")))

    # --- text <-> ids ---------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}")
        if self._add_bos_eos is None:
            return self._backend.encode(text, add_special_tokens=add_special_tokens).ids
        ids = self._backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens:
            add_bos, add_eos = self._add_bos_eos
            if add_bos and self.bos_token_id is not None:
                ids.insert(0, self.bos_token_id)
            if add_eos and self.eos_token_id is not None:
                ids.append(self.eos_token_id)
        return ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        ids = ids if isinstance(ids, list) else [int(i) for i in ids]  # arrays, tensors, tuples
        return self._backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def backend_json(self) -> str:
        """The whole tokenizer as ``tokenizer.json`` text (what grammar engines read)."""
        return self._backend.to_str()

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self._backend.id_to_token(int(i)) for i in ids]

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, tools=None,
                            **kwargs) -> str:
        """The prompt text for ``messages`` (not tokenized). Encode it with
        ``add_special_tokens=False``: templates write their own BOS."""
        if self._template is None:
            raise ValueError(f"messages: the model {self.name_or_path!r} has no chat template; "
                             "send a plain completion prompt instead")
        return self._template.render(messages, add_generation_prompt=add_generation_prompt, tools=tools, **kwargs)

    def same_vocabulary(self, other: Tokenizer) -> bool:
        """Every token text has the same id in both (added tokens included): ids
        one produces mean the same text to the other (a draft model's check)."""
        return self._backend.get_vocab(with_added_tokens=True) == other._backend.get_vocab(with_added_tokens=True)

    def __repr__(self) -> str:
        return f"Tokenizer({self.name_or_path!r}, vocab_size={self.vocab_size})"

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self._backend.token_to_id(token)

    def _end_of_generation_ids(self, extra_ids) -> set[int]:
        ids = {i for i in extra_ids if i is not None}
        if self.eos_token_id is not None:
            ids.add(self.eos_token_id)
        template = self.chat_template or ""
        for token in (*_END_OF_TURN, *_END_OF_DOCUMENT):
            token_id = self._id_of(token)
            if token_id in self.all_special_ids and (token in _END_OF_DOCUMENT or token in template):
                ids.add(token_id)
        return ids


def load_tokenizer(source: str | os.PathLike) -> Tokenizer:
    """A .gguf file, a folder with tokenizer.json, or a folder holding one .gguf file."""
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"tokenizer: no such file or directory: {source}")
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return Tokenizer.from_hf_dir(path)
        ggufs = sorted(path.glob("*.gguf"))
        return Tokenizer.from_gguf(ggufs[0]) if ggufs else Tokenizer.from_hf_dir(path)
    if path.name == "tokenizer.json":
        return Tokenizer.from_hf_dir(path.parent)
    if path.suffix == ".gguf" or _has_gguf_magic(path):
        return Tokenizer.from_gguf(path)
    raise ValueError(f"tokenizer: {source} is neither a .gguf file nor a folder with tokenizer.json")


# --- GGUF ------------------------------------------------------------------------------

def read_gguf_tokenizer_fields(path) -> dict:
    """The ``tokenizer.*`` metadata of a GGUF file as plain Python values."""
    from tokenmill.model.gguf_file import gguf_file

    return {key: value for key, value in gguf_file(path).fields.items() if key.startswith("tokenizer.")}


def _gguf_token(fields: dict, key: str) -> str | None:
    """The text of the token whose id is stored under ``tokenizer.ggml.<key>``."""
    tokens, token_id = fields["tokenizer.ggml.tokens"], fields.get(f"tokenizer.ggml.{key}")
    return tokens[token_id] if token_id is not None and 0 <= token_id < len(tokens) else None


def _token_types(fields: dict) -> list[int]:
    tokens = fields["tokenizer.ggml.tokens"]
    types = fields.get("tokenizer.ggml.token_type")
    if types is not None:
        return list(types)
    # Old files without types: at least keep the named special tokens whole.
    types = [NORMAL] * len(tokens)
    for key in _GGUF_SPECIAL_KEYS.values():
        token_id = fields.get(f"tokenizer.ggml.{key}")
        if token_id is not None and 0 <= token_id < len(tokens):
            types[token_id] = CONTROL
    return types


def _add_gguf_added_tokens(backend: tokenizers.Tokenizer, tokens: list[str], types: list[int]) -> None:
    """Control and unknown tokens become special added tokens (matched whole in text, dropped
    by skip_special_tokens); user-defined ones are matched whole but kept in decoded text.
    They sit in the vocabulary under their raw text, so they keep their file ids."""
    special = [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k in (CONTROL, UNKNOWN)]
    plain = [AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == USER_DEFINED]
    if special:
        backend.add_special_tokens(special)
    if plain:
        backend.add_tokens(plain)


def _byte_level_backend(fields: dict, types: list[int]) -> tokenizers.Tokenizer:
    """GPT-2 style byte-level BPE ("gpt2" in GGUF: Llama-3, Qwen2, SmolLM, ...)."""
    alphabet = _byte_alphabet()
    letters = set(alphabet.values())
    vocab: dict[str, int] = {}
    for i, (token, kind) in enumerate(zip(fields["tokenizer.ggml.tokens"], types)):
        if kind in (NORMAL, BYTE, UNUSED) and not set(token) <= letters:
            # A few converters store raw text; BPE needs the byte-alphabet spelling.
            token = "".join(alphabet[b] for b in token.encode("utf-8"))
        vocab.setdefault(token, i)
    merges = [tuple(m.split(" ", 1)) for m in fields.get("tokenizer.ggml.merges", ())]
    pre = fields.get("tokenizer.ggml.pre", "default")
    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, fuse_unk=False,
                                              ignore_merges=pre in _IGNORE_MERGES))
    backend.pre_tokenizer = _byte_level_pre_tokenizer(pre)
    backend.decoder = decoders.ByteLevel()
    return backend


def _sentencepiece_backend(fields: dict, types: list[int]) -> tokenizers.Tokenizer:
    """SentencePiece BPE ("llama" in GGUF: Llama-1/2, Mistral v0.1, TinyLlama): '▁' for
    spaces, byte tokens (<0x0A>) for characters outside the vocabulary."""
    tokens = fields["tokenizer.ggml.tokens"]
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    if "tokenizer.ggml.merges" in fields:
        merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    else:
        merges = _merges_from_scores(tokens, fields.get("tokenizer.ggml.scores"), types)
    unk_id = fields.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unk_id] if unk_id is not None and 0 <= unk_id < len(tokens) else None
    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True,
                                              byte_fallback=True, dropout=None))
    add_prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))
    # llama.cpp (and sentencepiece) put one space before every text run -- also after a
    # special token, also before text that starts with spaces. A normalizer runs once per
    # run between added tokens, so Prepend does exactly that; Metaspace would skip the
    # prefix when the run already starts with a space.
    steps = [normalizers.Prepend("▁")] if add_prefix else []
    backend.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "▁")])
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_prefix:
        steps.append(decoders.Strip(" ", 1, 0))  # the prefix space added at encode time
    backend.decoder = decoders.Sequence(steps)
    return backend


def _merges_from_scores(tokens: list[str], scores, types: list[int]) -> list[tuple[str, str]]:
    """SentencePiece BPE merges the adjacent pair whose union scores highest; as BPE ranks
    that is every split of a normal token into two normal tokens, best score first
    (ties: longer left piece first, then vocabulary order)."""
    if scores is None:
        raise ValueError("tokenizer: sentencepiece GGUF has neither merges nor scores")
    normal = {t: i for i, (t, k) in enumerate(zip(tokens, types)) if k == NORMAL}
    ranked = []
    for token, token_id in normal.items():
        pairs = [(token[:k], token[k:]) for k in range(1, len(token)) if token[:k] in normal and token[k:] in normal]
        pairs.sort(key=lambda p: (normal[p[0]], normal[p[1]]))
        ranked.extend((scores[token_id], left, right) for left, right in pairs)
    ranked.sort(key=lambda m: (m[0], len(m[1]), len(m[2])), reverse=True)
    return [(left, right) for _, left, right in ranked]


# Pre-tokenizer split regexes, keyed by tokenizer.ggml.pre (as llama.cpp groups them).
_WORDS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
_REST = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LLAMA3 = _WORDS + r"\p{N}{1,3}" + _REST
_QWEN2 = _WORDS + r"\p{N}" + _REST
_SPLITS = {**dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "smaug-bpe", "dbrx", "falcon3"), _LLAMA3),
           **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez"), _QWEN2)}
# Llama-3's vocabulary takes a whole pre-token that is in it before trying merges.
_IGNORE_MERGES = frozenset(("llama3", "llama-v3", "llama-bpe", "smaug-bpe", "dbrx", "falcon3"))
# Every digit is its own pre-token, then the GPT-2 split (StarCoder-derived vocabularies).
_DIGITS_FIRST = frozenset(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"))
_GPT2 = frozenset(("default", "gpt2", "gpt-2", "mpt", "olmo", "jais"))


def _byte_level_pre_tokenizer(pre: str):
    if pre in _SPLITS:
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(_SPLITS[pre]), behavior="isolated"),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # the GPT-2 regex
    if pre in _DIGITS_FIRST:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre not in _GPT2:
        log.warning("GGUF pre-tokenizer %r is not known; splitting text the GPT-2 way", pre)
    return byte_level


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map: printable Latin-1 bytes stand for
    themselves, the rest are shifted to U+0100 onwards in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shift = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def _has_gguf_magic(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


# --- Hugging Face folder ---------------------------------------------------------------

def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data if isinstance(data, dict) else {}


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: text or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _as_ids(value) -> list[int]:
    if isinstance(value, int):
        return [value]
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


def _hf_chat_template(root: Path, config: dict) -> str | None:
    """transformers 5 saves chat_template.jinja; older folders keep it in the config,
    either as text or as named templates (the "default" one is used)."""
    jinja_file = root / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template") or _read_json(root / "chat_template.json").get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) else None
