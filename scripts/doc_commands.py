#!/usr/bin/env python3
"""Run the commands a document shows and check what they print (so the docs cannot drift).

    scripts/doc_commands.py README.md [docs/x.md ...]

Two kinds of blocks: shell sessions (below), and a document's Python blocks as one
interpreter session (`python_session`; run it with the interpreter that has rnnlens
installed, e.g. python/.venv/bin/python).

A runnable block sits between `<!-- run: NAME -->` and `<!-- /run -->` in a ```console fence:
a line starting with `$ ` is a command (run by bash, in a fresh directory, the repository's
`target/release` first on PATH, every command of a block in the same shell so that `export`
and `cd` carry over), the lines after it are what it must print: each must match, in order, a
line of its output (stdout and stderr together), `…` standing for any text. A block's commands
run in a temporary directory that the repository's root is linked into as `repo` unless
RUN_IN_REPO=1 (then in the root itself, as a reader would)."""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def blocks(text):
    for m in re.finditer(r"<!-- run: (\S+) -->\s*```console\n(.*?)```\s*<!-- /run -->", text, re.S):
        steps = []
        for line in m.group(2).splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps and line.strip():
                steps[-1][1].append(line)
        yield m.group(1), steps


def pattern(line):
    return re.compile("^" + ".*".join(re.escape(p) for p in line.split("…")) + "$")


def unmatched(want, lines):
    """The first of the lines `want` that no line of `lines` matches in order, or None."""
    at = 0
    for w in want:
        p = pattern(w)
        while at < len(lines) and not p.match(lines[at]):
            at += 1
        if at == len(lines):
            return w
        at += 1
    return None


def run_block(name, steps):
    work = ROOT if os.environ.get("RUN_IN_REPO") else Path(tempfile.mkdtemp(prefix=f"doc-{name}-"))
    # One shell for the block: each command's output framed by a marker with its exit status.
    script = ["set -o pipefail", f"cd {str(work)!r}", f"export PATH={str(ROOT / 'target' / 'release')!r}:$PATH"]
    for i, (cmd, _) in enumerate(steps):
        cmd = re.sub(r"cargo build --release( -q)?", lambda m: f"(cd {str(ROOT)!r} && {m.group(0)})", cmd)
        cmd = cmd.replace('"$PWD/target/release', f'"{ROOT}/target/release')
        script.append(f"{{ {cmd} ; }} 2>&1; echo \"@@doc-step {i} $?\"")
    out = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True).stdout
    parts = re.split(r"^@@doc-step (\d+) (\d+)$", out, flags=re.M)
    outputs = {int(parts[i + 1]): (parts[i], int(parts[i + 2])) for i in range(0, len(parts) - 2, 3)}
    failures = []
    for i, (cmd, want) in enumerate(steps):
        if i not in outputs:
            failures.append(f"$ {cmd}\n  did not run (the block stopped before it)")
            continue
        got, code = outputs[i]
        lines = got.splitlines()
        if code != 0:
            failures.append(f"$ {cmd}\n  exited with {code}:\n{got}")
            continue
        missing = unmatched(want, lines)
        if missing is not None:
            failures.append(f"$ {cmd}\n  printed no line matching (in order):\n    {missing}\n  it printed:\n{got}")
    return failures


def python_session(path, text):
    """Every ```python block of a document marked `<!-- run: python session -->`, in order, as
    one interpreter session in a fresh directory: after each top-level statement, the full-line
    comments right below it (`# ...`) are what it must print (its own printing, then the value of
    an expression statement as the interpreter echoes it), `…` standing for any text."""
    import ast
    import contextlib
    import io
    failures, ns = [], {"__name__": "__main__"}
    os.chdir(tempfile.mkdtemp(prefix="doc-python-"))
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        lines = block.splitlines()
        for node in ast.parse(block).body:
            expected, k = [], node.end_lineno
            while k < len(lines) and lines[k].startswith("# "):
                expected.append(lines[k][2:])
                k += 1
            src = "\n".join(lines[node.lineno - 1:node.end_lineno])
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    if isinstance(node, ast.Expr):
                        value = eval(compile(ast.Expression(node.value), path, "eval"), ns)
                        if value is not None:
                            print(repr(value))
                    else:
                        exec(compile(ast.Module([node], []), path, "exec"), ns)
            except Exception as e:  # a failing statement is a failure of the document
                failures.append(f"{src}\n  raised {type(e).__name__}: {e}")
                return failures
            missing = unmatched(expected, out.getvalue().splitlines())
            if missing is not None:
                failures.append(f"{src}\n  printed no line matching (in order):\n    {missing}\n  it printed:\n{out.getvalue()}")
    return failures


def main(paths):
    bad = 0
    for path in paths:
        text = Path(path).read_text()
        if "<!-- run: python session -->" in text:
            failures = python_session(path, text)
            print(f"{path}: python session, {'ok' if not failures else str(len(failures)) + ' failed'}")
            for f in failures:
                print(f)
            bad += len(failures)
        for name, steps in blocks(text):
            failures = run_block(name, steps)
            print(f"{path}: {name}: {len(steps)} commands, {'ok' if not failures else str(len(failures)) + ' failed'}")
            for f in failures:
                print(f)
            bad += len(failures)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1:] or ["README.md"])
