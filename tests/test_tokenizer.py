"""Tokenizer, chat template and incremental detokenizer, against transformers as reference.

The reference loads the same embedded GGUF with ``AutoTokenizer(..., gguf_file=...)``.
One known difference: transformers ignores the GGUF pre-tokenizer type "smollm", which
(in llama.cpp and in SmolLM2's own tokenizer.json) makes every digit its own pre-token.
The two only disagree on whitespace runs or symbols right before a digit; those cases
are checked separately against the reference applied digit-run by digit-run.
"""

import json
import shutil
import unicodedata

import numpy as np
import pytest

from tokenmill.model.chat_template import ChatTemplate
from tokenmill.model.detokenizer import IncrementalDetokenizer
from tokenmill.model.embedded import embedded_gguf_path
from tokenmill.model.tokenizer import Tokenizer, load_tokenizer

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "hello",
    " leading space",
    "trailing space ",
    "multiple   spaces   between",
    "line one\nline two\n\nline four\n",
    "\n\n\n",
    "   ",
    "def add(a, b):\n    return a + b\n",
    "class Foo:\n\tdef bar(self):\n\t\tpass\n",
    "if (x) {\n        y = x * 2;\n}",
    "for i in range(10): print(i)",
    "1234567",
    "3.14159",
    "pi is 3.14159 and e is 2.71828",
    "Call 555-0123 or +1 (800) 555 0199.",
    "$19.99, 50% off, 1,000,000 users",
    "I don't know, I'll see, we're done, it's fine, they've gone, I'm here, she'd go.",
    "DON'T SHOUT, I'LL LISTEN",
    "Emoji: 😀🎉👍🏽 and 👨‍👩‍👧",
    "日本語のテキストです。",
    "中文字符测试",
    "한국어 텍스트",
    "Café naïve résumé façade",
    "مرحبا بالعالم",
    "Привет, мир!",
    "Ελληνικά γράμματα",
    "math: ∑ x² ≤ ∞, α→β",
    "<|im_start|>user\nHi there<|im_end|>",
    "<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<repo_name>tokenmill<file_sep>main.py",
    "<|im_start",
    "",
    "a",
    "   indented\twith\ttabs",
    "URL: https://example.com/path?q=1&r=2#frag",
    '{"key": [1, 2, 3], "nested": {"a": null}}',
    "Mixed CASE words AndCamelCase snake_case kebab-case",
    "zero\u200bwidth and\u00a0nbsp",
]

# Whitespace runs or symbols with merges (Ġ²) right before a numeric character.
DIGIT_CASES = ["a  1", "x\n\n1", "Steps:\n\n1. one\n2. two", "    42", "½ ² ٣", "tab\t\t7"]

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke about 日本 😀"}],
    [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "a"},
     {"role": "assistant", "content": "b"}, {"role": "user", "content": "c\n\nd"}],
]


@pytest.fixture(scope="module")
def gguf_path():
    return embedded_gguf_path()


@pytest.fixture(scope="module")
def tok(gguf_path):
    return Tokenizer.from_gguf(gguf_path)


@pytest.fixture(scope="module")
def hf(gguf_path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)


@pytest.fixture(scope="module")
def hf_dir(hf, tmp_path_factory):
    path = tmp_path_factory.mktemp("hf_tokenizer")
    hf.save_pretrained(path)
    return path


def digits_isolated(hf, text):
    """The reference with SmolLM2's digit split: encode each run between numerals apart."""
    ids, run = [], ""
    for ch in text:
        if unicodedata.category(ch).startswith("N"):
            ids += hf.encode(run, add_special_tokens=False) + hf.encode(ch, add_special_tokens=False)
            run = ""
        else:
            run += ch
    return ids + hf.encode(run, add_special_tokens=False)


# --- GGUF tokenizer ---------------------------------------------------------------------

def test_metadata(tok):
    assert tok.vocab_size == 49152
    assert (tok.bos_token_id, tok.eos_token_id) == (1, 2)
    assert tok.eos_token_ids == {2, 0}  # <|im_end|> (eos, ends a turn) and <|endoftext|>
    assert tok.all_special_ids == frozenset(range(17))  # the 17 control tokens
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert tok.name_or_path.endswith(".gguf")


@pytest.mark.parametrize("text", TEXTS)
def test_ids_match_reference(tok, hf, text):
    assert tok.encode(text) == hf.encode(text, add_special_tokens=True)
    assert tok.encode(text, add_special_tokens=False) == hf.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("text", DIGIT_CASES)
def test_digits_are_their_own_pre_tokens(tok, hf, text):
    assert tok.encode(text) == digits_isolated(hf, text)


def test_known_digit_split(tok):
    # "a", "ĠĠ" (one token for the run), "1": llama.cpp's smollm pre-tokenizer.
    assert tok.convert_ids_to_tokens(tok.encode("a  1")) == ["a", "ĠĠ", "1"]


def test_no_bos_for_smollm(tok):
    assert tok.encode("hi")[0] != tok.bos_token_id
    assert tok.encode("") == []


@pytest.mark.parametrize("skip", [True, False])
def test_decode_matches_reference(tok, hf, skip):
    for text in TEXTS + DIGIT_CASES:
        ids = tok.encode(text)
        assert tok.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip), text
        if not skip:
            assert tok.decode(ids, skip_special_tokens=False) == text  # byte-level BPE is lossless


def test_convert_ids_to_tokens(tok, hf):
    ids = tok.encode("Hello <|im_end|> 日本")
    assert tok.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)


def test_special_tokens_skipped(tok):
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2
    assert tok.decode(ids) == "user\nhi"


# --- chat template -----------------------------------------------------------------------

@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_reference(tok, hf, messages, add_generation_prompt):
    expected = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == expected


def test_chat_template_default_adds_generation_prompt(tok):
    assert tok.apply_chat_template(CONVERSATIONS[0]).endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("messages", [
    "hello",
    None,
    [],
    [{"content": "no role"}],
    [{"role": "user"}],
    [{"role": "user", "content": None}],
    [{"role": "user", "content": 42}],
    ["not a dict"],
])
def test_bad_messages(tok, messages):
    with pytest.raises(ValueError, match="messages"):
        tok.apply_chat_template(messages)


def test_template_features():
    source = ("{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
              "{% generation %}{{ m | tojson }}{% endgeneration %}{% endfor %}{{ ns.n }}"
              "{% if strftime_now('%Y') | length != 4 %}{{ raise_exception('bad year') }}{% endif %}")
    template = ChatTemplate(source, {"bos_token": "<s>"})
    messages = [{"role": "user", "content": "<b>&'é"}]
    # tojson must not HTML-escape and must keep non-ASCII, like transformers.
    assert template.render(messages) == '<s>{"role": "user", "content": "<b>&\'é"}1'


def test_template_errors_are_value_errors():
    template = ChatTemplate("{{ raise_exception('roles must alternate') }}", {})
    with pytest.raises(ValueError, match="messages: .*roles must alternate"):
        template.render([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="messages"):
        ChatTemplate("{% set ns = namespace(_x=1) %}", {}).render([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="messages"):  # SmolLM2's template concatenates strings
        ChatTemplate("{{ messages[0]['content'] + '!' }}", {}).render(
            [{"role": "user", "content": [{"type": "text", "text": "x"}]}])
    with pytest.raises(ValueError, match="chat template: syntax error"):
        ChatTemplate("{% for %}", {}).render([{"role": "user", "content": "x"}])


def test_assistant_with_tool_calls_and_null_content():
    template = ChatTemplate("{% for m in messages %}{{ m.role }}:{{ m.content | default('-') }};{% endfor %}", {})
    messages = [{"role": "user", "content": "x"},
                {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}]
    assert template.render(messages, add_generation_prompt=False) == "user:x;assistant:-;"


# --- Hugging Face folder -----------------------------------------------------------------

def test_hf_dir_matches_reference(hf, hf_dir):
    tok = Tokenizer.from_hf_dir(hf_dir)
    for text in TEXTS + DIGIT_CASES:  # a saved tokenizer.json says how to split: no digit rule
        assert tok.encode(text) == hf.encode(text), text
        ids = tok.encode(text)
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=True)
    for messages in CONVERSATIONS:
        assert tok.apply_chat_template(messages) == hf.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True)
    assert (tok.bos_token_id, tok.eos_token_id, tok.vocab_size) == (1, 2, 49152)
    assert 2 in tok.eos_token_ids
    assert tok.all_special_ids == frozenset(range(17))


def test_hf_dir_config_flags(hf_dir, tmp_path):
    folder = tmp_path / "tok"
    shutil.copytree(hf_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["add_bos_token"] = True
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    tok = load_tokenizer(folder)
    assert tok.encode("hi")[0] == 1
    assert tok.encode("hi", add_special_tokens=False)[0] != 1
    assert tok.eos_token_ids >= {0, 2}


def test_hf_dir_without_template(hf_dir, tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    shutil.copy(hf_dir / "tokenizer.json", folder / "tokenizer.json")
    tok = load_tokenizer(folder / "tokenizer.json")
    assert tok.chat_template is None and tok.bos_token_id is None
    with pytest.raises(ValueError, match="chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


# --- loading errors ----------------------------------------------------------------------

def test_load_tokenizer_dispatch(spm_path):
    # The tiny file keeps this fast; the embedded one takes seconds to read.
    by_file, by_folder = load_tokenizer(spm_path), load_tokenizer(spm_path.parent)
    assert by_file.name_or_path == by_folder.name_or_path == str(spm_path)
    assert by_file.encode("hello world") == by_folder.encode("hello world")


def test_missing_path(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        load_tokenizer(missing)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Tokenizer.from_hf_dir(tmp_path)


def write_tiny_gguf(path, model, tokens, types, scores=None, **flags):
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, value in dict(block_count=1, context_length=64, embedding_length=8, feed_forward_length=16,
                            head_count=2, layer_norm_rms_eps=1e-5).items():
        getattr(writer, f"add_{name}")(value)
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if scores is not None:
        writer.add_token_scores(scores)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    for name, value in flags.items():
        getattr(writer, f"add_{name}")(value)
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_unsupported_gguf_model(tmp_path):
    path = write_tiny_gguf(tmp_path / "t5.gguf", "t5", ["<unk>", "<s>", "</s>", "a"], [2, 3, 3, 1], [0.0] * 4)
    with pytest.raises(ValueError, match="'t5'"):
        load_tokenizer(path)


# --- sentencepiece ("llama") GGUF, on a hand-made vocabulary --------------------------------

SPM_WORDS = ["▁", "h", "e", "l", "o", "w", "r", "d", "a", "b", "c", "▁h", "he", "ll", "lo", "llo", "hello",
             "▁hello", "▁w", "or", "ld", "▁world", "wor", "▁wor", "ab", "abc", "▁▁"]


@pytest.fixture(scope="module")
def spm_path(tmp_path_factory):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + SPM_WORDS
    types = [2, 3, 3] + [6] * 256 + [1] * len(SPM_WORDS)
    scores = [0.0] * 259 + [-float(i) for i in range(len(SPM_WORDS))]
    folder = tmp_path_factory.mktemp("spm")
    return write_tiny_gguf(folder / "spm.gguf", "llama", tokens, types, scores)


def test_sentencepiece_matches_reference(spm_path):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(spm_path.parent), gguf_file=spm_path.name)
    tok = Tokenizer.from_gguf(spm_path)
    for text in ["hello world", "héllo wörld", "abc abcd", "hello\nworld", "hello  world", "", "ab€"]:
        ids = tok.encode(text)
        assert ids == hf.encode(text), text
        assert ids[0] == 1  # llama.cpp adds BOS to sentencepiece vocabularies by default
        assert tok.decode(ids) == text  # byte fallback makes unknown characters round-trip


def test_sentencepiece_prefix_space_like_llama_cpp(spm_path):
    tok = Tokenizer.from_gguf(spm_path)
    # One space before every text run, also before leading spaces and after special
    # tokens (transformers' GGUF conversion uses Metaspace, which does neither).
    assert tok.convert_ids_to_tokens(tok.encode("  hello")) == ["<s>", "▁▁", "▁h", "e", "llo"]
    assert tok.convert_ids_to_tokens(tok.encode("<s>hello", add_special_tokens=False)) == ["<s>", "▁h", "e", "llo"]
    assert tok.all_special_ids == frozenset({0, 1, 2})


# --- incremental detokenizer ---------------------------------------------------------------

STREAM_TEXTS = ["Hello 😀 world 日本語のテキスト 🎉🎉 ok", "naïve café — “quotes” 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 👨‍👩‍👧",
                "中文字符测试，한국어 텍스트", "<|im_start|>hi<|im_end|> after"]


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("text", STREAM_TEXTS)
def test_detokenizer_one_token_at_a_time(tok, text, skip):
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "日本"}]))
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok, prompt, skip_special_tokens=skip)
    deltas = [detok.step([i]) for i in ids]
    deltas.append(detok.flush())
    assert not any("\ufffd" in d for d in deltas)
    assert "".join(deltas) == detok.text == tok.decode(ids, skip_special_tokens=skip)
    assert len(detok._ids) <= 8  # only a short window is kept and decoded


def test_detokenizer_uneven_chunks_and_empty_prompt(tok):
    text = " ".join(STREAM_TEXTS)
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok, [])
    deltas, i, size = [], 0, 1
    while i < len(ids):
        deltas.append(detok.step(ids[i:i + size]))
        i, size = i + size, size % 3 + 1
    deltas.append(detok.step([]))
    deltas.append(detok.flush())
    assert not any("\ufffd" in d for d in deltas)
    assert "".join(deltas) == tok.decode(ids)


def test_detokenizer_holds_incomplete_character(tok):
    ids = tok.encode("ok 😀")[:-1]  # the emoji loses its last byte token
    detok = IncrementalDetokenizer(tok, [])
    deltas = [detok.step([i]) for i in ids]
    assert "".join(deltas).rstrip() == "ok" and "\ufffd" not in "".join(deltas)
    rest = detok.flush()  # never completed: comes out as the replacement character
    assert rest.endswith("\ufffd") and "".join(deltas) + rest == tok.decode(ids)
    assert detok.flush() == ""
