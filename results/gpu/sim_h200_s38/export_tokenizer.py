"""Write the embedded GGUF's tokenizer as a Hugging Face folder (tokenizer.json, tokenizer_config.json):
the GGUF (98 MB) is over the device tool's transfer limit; the dummy-weight runs there need only its tokenizer.
Checks that the folder encodes and decodes a sample as the GGUF does.   Usage: python export_tokenizer.py DIR"""
import json
import sys
from pathlib import Path

from tokenmill.model.embedded import embedded_gguf_path
from tokenmill.model.tokenizer import Tokenizer, load_tokenizer

src = load_tokenizer(embedded_gguf_path())
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
(out / "tokenizer.json").write_text(src.backend_json())
add_bos, add_eos = src._add_bos_eos or (False, False)
(out / "tokenizer_config.json").write_text(json.dumps(
    {**src.special_tokens, "chat_template": src.chat_template, "add_bos_token": add_bos, "add_eos_token": add_eos}))
back = Tokenizer.from_hf_dir(out)
sample = "Hello there, tokenmill! 1234 <|im_start|>user\nhi<|im_end|>"
assert back.encode(sample) == src.encode(sample) and back.eos_token_id == src.eos_token_id, "round trip"
assert back.apply_chat_template([{"role": "user", "content": "hi"}]) == \
    src.apply_chat_template([{"role": "user", "content": "hi"}])
print(f"wrote {out}: vocab {back.vocab_size}, eos {back.eos_token_id}, bos {back.bos_token_id}")
