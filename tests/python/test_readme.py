"""The README's Python example runs as written (against a server on a free port)."""

import contextlib
import io
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "..", "README.md")


def test_readme_python_example(server):
    with open(README) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert blocks, "README.md has no python example"
    code = blocks[0].replace("127.0.0.1:7071", server.rpc)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})  # noqa: S102 (our own README)
    expected = [line.split("# ")[-1].strip() for line in code.splitlines()
                if line.strip().startswith("print(") and "# " in line]
    assert out.getvalue().split() == expected
