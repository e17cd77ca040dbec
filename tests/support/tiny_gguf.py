"""A tiny llama-architecture model as GGUF, written with llama.cpp's own gguf-py, nothing
downloaded: random weights, 64-wide embeddings, 2 layers, a 304-token vocabulary.

Enough for a real `llama-server` to load it, print its startup lines and answer requests
(nonsense): the worker reads the engine, not the model. About half a megabyte.

    python -m tests.support.tiny_gguf OUT.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

EMBEDDING = 64
LAYERS = 2
HEADS = 4
FEED_FORWARD = 128
CONTEXT = 256
SPECIAL = ["<unk>", "<s>", "</s>"]
BYTES = [f"<0x{b:02X}>" for b in range(256)]
WORDS = ["▁the", "▁a", "▁GPU", "▁CPU", "▁model", "▁shard", "▁is", "▁on", "▁it", "▁and"]
WORDS += [f"▁w{n}" for n in range(304 - len(SPECIAL) - len(BYTES) - 10)]
VOCAB = [*SPECIAL, *BYTES, *WORDS]


def write(path: Path, seed: int = 7) -> Path:
    """The model, written to `path`."""
    import gguf

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("placewatch-tiny")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBEDDING)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(EMBEDDING // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _tokenizer(writer, gguf)

    def tensor(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    tensor("token_embd.weight", len(VOCAB), EMBEDDING)
    writer.add_tensor("output_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
    tensor("output.weight", len(VOCAB), EMBEDDING)
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
        for part in ("q", "k", "v", "output"):
            tensor(f"blk.{i}.attn_{part}.weight", EMBEDDING, EMBEDDING)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
        tensor(f"blk.{i}.ffn_gate.weight", FEED_FORWARD, EMBEDDING)
        tensor(f"blk.{i}.ffn_up.weight", FEED_FORWARD, EMBEDDING)
        tensor(f"blk.{i}.ffn_down.weight", EMBEDDING, FEED_FORWARD)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _tokenizer(writer: object, gguf: object) -> None:
    """A SentencePiece-style vocabulary: the three specials, the 256 byte tokens, words."""
    token_type = gguf.TokenType  # type: ignore[attr-defined]
    types = [token_type.UNKNOWN, token_type.CONTROL, token_type.CONTROL]
    types += [token_type.BYTE] * len(BYTES) + [token_type.NORMAL] * len(WORDS)
    writer.add_tokenizer_model("llama")  # type: ignore[attr-defined]
    writer.add_token_list(VOCAB)  # type: ignore[attr-defined]
    writer.add_token_scores([-float(n) for n in range(len(VOCAB))])  # type: ignore[attr-defined]
    writer.add_token_types(types)  # type: ignore[attr-defined]
    writer.add_unk_token_id(0)  # type: ignore[attr-defined]
    writer.add_bos_token_id(1)  # type: ignore[attr-defined]
    writer.add_eos_token_id(2)  # type: ignore[attr-defined]


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))
