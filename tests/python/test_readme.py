"""The Python examples of README.md and docs/python.md run as written (against a server on a
free port); each `print(...)  # value` line must print that value."""

import contextlib
import io
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "..", "README.md")


PYTHON_DOC = os.path.join(HERE, "..", "..", "docs", "python.md")


def run_first_example(path, server):
    with open(path) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert blocks, f"{path} has no python example"
    code = blocks[0].replace("127.0.0.1:7071", server.rpc)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, os.path.basename(path), "exec"), {})  # noqa: S102 (our own docs)
    expected = [line.split("# ")[-1].strip() for line in code.splitlines()
                if line.strip().startswith("print(") and "# " in line]
    assert out.getvalue().split() == expected


def test_readme_python_example(server):
    run_first_example(README, server)


def test_python_doc_example(server):
    run_first_example(PYTHON_DOC, server)
