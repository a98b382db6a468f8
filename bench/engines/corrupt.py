#!/usr/bin/env python3
"""Writes the malformed copies of a GGUF file that run.sh feeds each engine.

    corrupt.py MODEL.gguf OUT_DIR

- half.gguf: the file cut at half its size (a download cut short).
- tensor-count.gguf: the header's tensor count (bytes 8-15) made 2**63 - 1.
- key-length.gguf: the first metadata key's length (bytes 24-31) made about 2**60.
- head-count-kv.gguf: a well-formed file whose `ARCH.attention.head_count_kv` (the number of
  key/value heads) is one less than it was, so the metadata contradicts the tensors' shapes.
"""
import struct
import sys
from pathlib import Path

# Sizes of the fixed-size GGUF value types, by type number.
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY, UINT32 = 8, 9, 4


def skip_value(data: bytes, pos: int, kind: int) -> int:
    if kind in FIXED:
        return pos + FIXED[kind]
    if kind == STRING:
        (n,) = struct.unpack_from("<Q", data, pos)
        return pos + 8 + n
    if kind == ARRAY:
        item, count = struct.unpack_from("<IQ", data, pos)
        pos += 12
        for _ in range(count):
            pos = skip_value(data, pos, item)
        return pos
    sys.exit(f"corrupt.py: unknown GGUF value type {kind} at byte {pos}")


def metadata_offsets(data: bytes) -> dict:
    """Each metadata key's (value type, value offset)."""
    if data[:4] != b"GGUF":
        sys.exit("corrupt.py: not a GGUF file (no GGUF magic)")
    _version, _tensors, kvs = struct.unpack_from("<IQQ", data, 4)
    pos, out = 24, {}
    for _ in range(kvs):
        (n,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8 : pos + 8 + n].decode()
        pos += 8 + n
        (kind,) = struct.unpack_from("<I", data, pos)
        pos += 4
        out[key] = (kind, pos)
        pos = skip_value(data, pos, kind)
    return out


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: corrupt.py MODEL.gguf OUT_DIR")
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    data = src.read_bytes()
    (out / "half.gguf").write_bytes(data[: len(data) // 2])

    b = bytearray(data)
    struct.pack_into("<Q", b, 8, 2**63 - 1)
    (out / "tensor-count.gguf").write_bytes(b)

    b = bytearray(data)
    struct.pack_into("<Q", b, 24, 0x0FFF_FFFF_FFFF_FF00)
    (out / "key-length.gguf").write_bytes(b)

    meta = metadata_offsets(data)
    arch_kind, arch_pos = meta["general.architecture"]
    (n,) = struct.unpack_from("<Q", data, arch_pos)
    arch = data[arch_pos + 8 : arch_pos + 8 + n].decode()
    kind, pos = meta[f"{arch}.attention.head_count_kv"]
    if kind != UINT32:
        sys.exit(f"corrupt.py: {arch}.attention.head_count_kv is of type {kind}, not uint32")
    (kv,) = struct.unpack_from("<I", data, pos)
    b = bytearray(data)
    struct.pack_into("<I", b, pos, max(kv - 1, 1))
    (out / "head-count-kv.gguf").write_bytes(b)


if __name__ == "__main__":
    main()
