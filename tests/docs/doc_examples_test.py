#!/usr/bin/python3
"""The examples of README.md and docs/*.md run as written, or say why not.

usage: doc_examples_test.py --server-bin KVATLAS_SERVER --cli-bin KVATLAS_CLI
           [--python-path DIR] [--python-env NAME=VALUE]... [--markers-only]
           [--verbose] SOURCE_DIR [FILE...]

What counts as an example. A fenced block (``` or ~~~) whose info string's first word is
sh, bash, shell, console, python, python3 or py, or a block with no info string whose first
line starts with "$ " (a console transcript). Other blocks (json, cpp, cmake, yaml, text,
formats and outputs without an info string) are reference, not examples: JSON bodies are
shown, not run.

Markers. The line before every example (blank lines allowed between) is one of
  <!-- doc-test: run -->
  <!-- doc-test: illustrative: <reason> -->
An example without one fails the test, which names its file:line. A marker with another
form, a marker followed by no fenced block, or `run` on a block that is not an example
fails too.

How `run` blocks run. One kvatlas-server per doc file (started at its first run block, on
free loopback ports, a temporary data directory, stopped after the file), and one temporary
working directory per file: the blocks of a file run in order against that server, so later
blocks see earlier writes. Rewriting rules, applied to the block's text:
  build/<preset>/server/kvatlas-server  -> kvatlas-server (the --server-bin given)
  build/<preset>/client/kvatlas         -> kvatlas (the --cli-bin given)
  localhost:7070, 127.0.0.1:7070        -> the server's REST address
  localhost:7071, 127.0.0.1:7071        -> the server's binary-protocol address
  scripts/...                           -> SOURCE_DIR/scripts/...
and the environment: PATH starts with the directories of --server-bin and --cli-bin (bare
`kvatlas-server` and `kvatlas` are the builds under test), KVATLAS_SERVER and KVATLAS_HTTP
are the server's addresses (so the CLI's defaults reach it), KVATLAS_SERVER_BIN is the
server binary (scripts/local-cluster starts it) and KVATLAS_CLUSTER_PORT_BASE a base whose
local-cluster ports are free; KVATLAS_TOKEN and KVATLAS_CLUSTER_DIR are unset.

Shell blocks (sh, bash, shell) run in one bash per block, `set -o pipefail`, command by
command (a command is the shortest run of lines that bash parses, so a multi-line curl is
one); the block stops at the first command that exits non-zero, and fails. In them `curl`
is `curl --fail-with-body` (an HTTP error status fails the command), and commands that follow
a stream forever — `curl -N` and `kvatlas watch` — are cut after FOLLOW_S seconds; being cut
counts as success, any other exit status is checked. Console blocks run each "$ " line (and
its "\\" continuation lines) the same way; the lines after it, up to the next "$ ", are its
expected output.

Expected output. In shell blocks, comment lines right after a command give its expected
stdout: `# → TEXT` (one line of output each), or `# {...}` / `# [...]` when the text parses
as JSON (the README's style after a curl). Expected and actual are compared as JSON when both
parse, else line by line (trailing white space ignored; "..." in a doc line stands for
any text, e.g. a random token). Python blocks run in a fresh
/usr/bin/python3 each (PYTHONPATH = --python-path, plus the --python-env variables, e.g. the
sanitizer runtime to preload); a `print(...)  # TEXT` line expects TEXT as the next line of
stdout, and when a block has any such line its whole stdout must be those lines in order. A
block that imports kvatlas is skipped, saying so, when no --python-path is given (built
without pybind11).

The test prints, per file, every example with its fate, then the number and share of
examples executed; it exits 1 on any failure, after running everything it can.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "fault"), os.path.join(HERE, "..", "python")]
from conftest import Server  # noqa: E402 - the Python suite's server on free ports
from local_cluster_test import free_port_base  # noqa: E402 - the same ports the script uses

SHELL_LANGS = {"sh", "bash", "shell"}
CONSOLE_LANGS = {"console"}
PYTHON_LANGS = {"python", "python3", "py"}
FOLLOW_S = 3
BLOCK_TIMEOUT_S = 90
MARKER_RE = re.compile(r"^\s*<!--\s*doc-test:(.*?)-->\s*$")
FENCE_RE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


class Block:
    def __init__(self, path, line, lang, body, marker, marker_line):
        self.path, self.line, self.lang, self.body = path, line, lang, body
        self.marker, self.marker_line = marker, marker_line  # marker text or None

    @property
    def where(self):
        return f"{self.path}:{self.line}"

    def is_example(self):
        if self.lang in SHELL_LANGS | CONSOLE_LANGS | PYTHON_LANGS:
            return True
        first = next((line for line in self.body if line.strip()), "")
        return self.lang == "" and first.startswith("$ ")

    def kind(self):
        if self.lang in PYTHON_LANGS:
            return "python"
        if self.lang in SHELL_LANGS:
            return "shell"
        return "console"


def parse_doc(path, rel):
    """Every fenced block of `path` with the marker before it; problems with markers."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, problems = [], []
    pending = None  # (marker text, line number) waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER_RE.match(line)
        fence = FENCE_RE.match(line)
        if marker:
            if pending:
                problems.append(f"{rel}:{pending[1]}: doc-test marker followed by no fenced "
                                "block (another marker comes first)")
            pending = (marker.group(1).strip(), i + 1)
        elif fence:
            indent, mark, info = fence.groups()
            end = i + 1
            while end < len(lines):
                close = lines[end].strip()
                if close.startswith(mark[0] * len(mark)) and not close.strip(mark[0]):
                    break
                end += 1
            body = [b[len(indent):] if b.startswith(indent) else b for b in lines[i + 1:end]]
            lang = info.strip().split()[0].lower() if info.strip() else ""
            blocks.append(Block(rel, i + 1, lang, body, *(pending or (None, None))))
            pending = None
            i = end
        elif line.strip() and pending:
            problems.append(f"{rel}:{pending[1]}: doc-test marker followed by text, not by "
                            "a fenced block")
            pending = None
        i += 1
    if pending:
        problems.append(f"{rel}:{pending[1]}: doc-test marker at the end of the file")
    for b in blocks:
        if b.marker is None:
            if b.is_example():
                problems.append(
                    f"{b.where}: {'```' + b.lang if b.lang else 'console'} example has no "
                    "doc-test marker: "
                    "put <!-- doc-test: run --> or <!-- doc-test: illustrative: <reason> --> "
                    "on the line before it (tests/docs/doc_examples_test.py)")
        elif b.marker == "run":
            if not b.is_example():
                problems.append(f"{b.where}: doc-test: run on a ```{b.lang} block, which is "
                                "not an example this test can run")
        elif b.marker.startswith("illustrative:"):
            if not b.marker[len("illustrative:"):].strip():
                problems.append(f"{rel}:{b.marker_line}: doc-test: illustrative needs a "
                                "reason after the colon")
        else:
            problems.append(f"{rel}:{b.marker_line}: unknown doc-test marker '{b.marker}': "
                            "use 'run' or 'illustrative: <reason>'")
    return blocks, problems


# ---------------------------------------------------------------------------------------
# The server and the environment a file's blocks run in.

class FileRun:
    """The server, working directory and environment shared by one doc file's blocks."""

    def __init__(self, args):
        self.args = args
        self.root = tempfile.mkdtemp(prefix="kvatlas-doc-")
        self.work = os.path.join(self.root, "work")
        os.makedirs(self.work)
        self.server = None
        self.env = dict(os.environ)

    def ensure_server(self):
        if self.server is None:
            try:
                self.server = Server(self.args.server_bin)
            except AssertionError as e:  # it did not start: its log's tail
                raise RuntimeError(str(e)) from None
            base = free_port_base(5)
            env = {k: v for k, v in os.environ.items()
                   if k not in ("KVATLAS_TOKEN", "KVATLAS_CLUSTER_DIR")}
            path_dirs = [os.path.dirname(self.args.server_bin), os.path.dirname(self.args.cli_bin)]
            env.update(PATH=os.pathsep.join(path_dirs + [env.get("PATH", "/usr/bin:/bin")]),
                       KVATLAS_SERVER=self.server.rpc, KVATLAS_HTTP=self.server.http,
                       KVATLAS_SERVER_BIN=self.args.server_bin,
                       KVATLAS_CLUSTER_PORT_BASE=str(base))
            self.env = env

    def rewrite(self, text):
        text = re.sub(r"build/[A-Za-z0-9_.-]+/server/kvatlas-server", "kvatlas-server", text)
        text = re.sub(r"build/[A-Za-z0-9_.-]+/client/kvatlas\b", "kvatlas", text)
        text = re.sub(r"\b(localhost|127\.0\.0\.1):7070\b", self.server.http, text)
        text = re.sub(r"\b(localhost|127\.0\.0\.1):7071\b", self.server.rpc, text)
        scripts = os.path.join(self.args.source_dir, "scripts") + "/"
        return re.sub(r"(?<![\w./-])scripts/", scripts, text)

    def cleanup(self):
        # A block that failed half-way may have left a local cluster running.
        for data in glob.glob(os.path.join(self.work, "**", "cluster-data"), recursive=True):
            subprocess.run([os.path.join(self.args.source_dir, "scripts", "local-cluster"),
                            "stop"], cwd=os.path.dirname(data), env=self.env,
                           capture_output=True, timeout=60, check=False)
        if self.server:
            self.server.cleanup()
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# Shell and console blocks.

PRELUDE = r"""
set -o pipefail
__follows() {  # __follows CMD ARGS...: runs a command that follows a stream, FOLLOW_S s
  timeout FOLLOW_S "$@"
  local rc=$?
  [ "$rc" -eq 124 ] && return 0
  return "$rc"
}
curl() {
  local a
  for a in "$@"; do
    if [[ "$a" =~ ^-[A-Za-z]*N[A-Za-z]*$ || "$a" == --no-buffer ]]; then
      __follows curl --fail-with-body "$@"
      return
    fi
  done
  command curl --fail-with-body "$@"
}
kvatlas() {
  if [ "${1:-}" = watch ]; then __follows kvatlas "$@"; else command kvatlas "$@"; fi
}
""".replace("FOLLOW_S", str(FOLLOW_S))


def parses(text):
    return subprocess.run(["bash", "-n"], input=text, capture_output=True,
                          text=True).returncode == 0


def shell_commands(body):
    """[(line offset, command text, [expected lines])] of a shell block."""
    commands, current, start = [], [], 0
    for n, line in enumerate(body):
        stripped = line.strip()
        if not current:
            if not stripped or stripped.startswith("#"):
                if commands and stripped.startswith("#"):
                    expect = stripped[1:].strip()
                    if expect.startswith("→"):
                        commands[-1][2].append(expect[1:].strip())
                    elif expect[:1] in "{[" and is_json(expect):
                        commands[-1][2].append(expect)
                continue
            start = n
        current.append(line)
        text = "\n".join(current)
        if not line.rstrip().endswith("\\") and parses(text + "\n"):
            commands.append((start, text, []))
            current = []
    if current:
        commands.append((start, "\n".join(current), []))  # bash will report the error
    return commands


def console_commands(body):
    commands, n = [], 0
    while n < len(body):
        if not body[n].startswith("$ "):
            n += 1
            continue
        start, cmd = n, [body[n][2:]]
        while cmd[-1].rstrip().endswith("\\") and n + 1 < len(body):
            n += 1
            cmd.append(body[n])
        n += 1
        expected = []
        while n < len(body) and not body[n].startswith("$ "):
            expected.append(body[n])
            n += 1
        while expected and not expected[-1].strip():
            expected.pop()
        commands.append((start, "\n".join(cmd), expected))
    return commands


def is_json(text):
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def same_output(expected_lines, actual):
    expected = "\n".join(expected_lines)
    try:
        return json.loads(expected) == json.loads(actual)
    except ValueError:
        pass
    actual_lines = [line.rstrip() for line in actual.rstrip("\n").split("\n")]
    if len(actual_lines) != len(expected_lines):
        return False
    return all(re.fullmatch(".*".join(map(re.escape, e.rstrip().split("..."))), a)
               for e, a in zip(expected_lines, actual_lines))


def run_shell(block, run):
    commands = (console_commands if block.kind() == "console" else shell_commands)(block.body)
    out_dir = tempfile.mkdtemp(dir=run.root, prefix="block-")
    script = [PRELUDE]
    for k, (_, text, _) in enumerate(commands):
        o = os.path.join(out_dir, str(k))
        script.append(f"{{\n{run.rewrite(text)}\n}} >'{o}.out' 2>'{o}.err' </dev/null\n"
                      f"__rc=$?; echo $__rc >'{o}.rc'; [ $__rc -eq 0 ] || exit 0\n")
    with open(os.path.join(out_dir, "script.sh"), "w") as f:
        f.write("".join(script))
    with open(os.path.join(out_dir, "bash.log"), "wb") as log:
        try:
            subprocess.run(["bash", os.path.join(out_dir, "script.sh")], cwd=run.work,
                           env=run.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                           timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return [f"{block.where}: did not finish in {BLOCK_TIMEOUT_S} s"], 0

    def read(k, ext):
        try:
            with open(os.path.join(out_dir, f"{k}.{ext}"), errors="replace") as f:
                return f.read()
        except OSError:
            return None

    compared = 0
    for k, (offset, text, expected) in enumerate(commands):
        where = f"{block.path}:{block.line + 1 + offset}"
        rc, out, err = read(k, "rc"), read(k, "out") or "", read(k, "err") or ""
        if run.args.verbose:
            print(f"    $ {run.rewrite(text)}\n" + "".join(
                f"    | {line}\n" for line in (out + err).rstrip("\n").split("\n")[:20]),
                end="")
        if rc is None:
            with open(os.path.join(out_dir, "bash.log"), errors="replace") as f:
                return [f"{where}: never ran (bash: {f.read()[-500:]})"], compared
        if int(rc) != 0:
            return [f"{where}: exit {int(rc)}\n  $ {run.rewrite(text)}\n"
                    f"  stdout: {out[-1500:]}\n  stderr: {err[-1500:]}"], compared
        if expected:
            compared += 1
            if not same_output(expected, out):
                return [f"{where}: output differs from the doc\n  $ {run.rewrite(text)}\n"
                        f"  doc:    {chr(10).join(expected)}\n  actual: {out.rstrip()}"], compared
    return [], compared


# ---------------------------------------------------------------------------------------
# Python blocks.

PRINT_EXPECT_RE = re.compile(r"^\s*print\(.*\)\s*#\s*(?:→\s*)?(.*?)\s*$")


def run_python(block, run):
    code = run.rewrite("\n".join(block.body) + "\n")
    if re.search(r"^\s*(import|from)\s+kvatlas\b", code, re.M) and not run.args.python_path:
        return None, 0  # skipped
    expected = [m.group(1) for m in map(PRINT_EXPECT_RE.match, block.body) if m]
    path = os.path.join(run.root, f"block_{block.line}.py")
    with open(path, "w") as f:
        f.write(code)
    env = dict(run.env, PYTHONDONTWRITEBYTECODE="1")
    if run.args.python_path:
        env["PYTHONPATH"] = run.args.python_path
    for assignment in run.args.python_env:
        name, _, value = assignment.partition("=")
        env[name] = value
    try:
        done = subprocess.run(["/usr/bin/python3", path], cwd=run.work, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [f"{block.where}: did not finish in {BLOCK_TIMEOUT_S} s"], 0
    if done.returncode != 0:
        return [f"{block.where}: python exit {done.returncode}\n  stdout: "
                f"{done.stdout[-1500:]}\n  stderr: {done.stderr[-2500:]}"], 0
    if expected:
        actual = [line.rstrip() for line in done.stdout.rstrip("\n").split("\n")]
        if actual != expected:
            return [f"{block.where}: printed {actual}, the doc says {expected}"], 1
        return [], 1
    return [], 0


# ---------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server-bin", required=True)
    p.add_argument("--cli-bin", required=True)
    p.add_argument("--python-path", default="")
    p.add_argument("--python-env", action="append", default=[])
    p.add_argument("--markers-only", action="store_true")
    p.add_argument("--verbose", action="store_true", help="print every command's output")
    p.add_argument("source_dir")
    p.add_argument("files", nargs="*")
    args = p.parse_args()
    args.source_dir = os.path.abspath(args.source_dir)
    args.server_bin = os.path.abspath(args.server_bin)
    args.cli_bin = os.path.abspath(args.cli_bin)
    if args.python_path:
        args.python_path = os.path.abspath(args.python_path)
    docs = ["README.md"] + sorted(os.path.relpath(f, args.source_dir) for f in
                                  glob.glob(os.path.join(args.source_dir, "docs", "*.md")))
    if args.files:
        docs = [d for d in docs if d in args.files or os.path.basename(d) in args.files]

    failures, totals = [], {"examples": 0, "run": 0, "skipped": 0, "compared": 0}
    per_file = {}
    for rel in docs:
        blocks, problems = parse_doc(os.path.join(args.source_dir, rel), rel)
        failures += problems
        examples = [b for b in blocks if b.is_example()]
        ran = 0
        run = FileRun(args) if not args.markers_only else None
        try:
            for b in examples:
                if b.marker != "run" or args.markers_only:
                    continue
                t0 = time.time()
                try:
                    run.ensure_server()
                except RuntimeError as e:
                    failures.append(f"{b.where}: {e}")
                    break
                errors, compared = (run_python if b.kind() == "python" else run_shell)(b, run)
                if errors is None:
                    print(f"  {b.where} {b.lang}: SKIPPED (no kvatlas Python package built)")
                    totals["skipped"] += 1
                    continue
                ran += 1
                totals["compared"] += compared
                status = "FAIL" if errors else "ok"
                print(f"  {b.where} {b.lang}: {status} ({time.time() - t0:.1f} s"
                      f"{f', {compared} output(s) compared' if compared else ''})", flush=True)
                if errors and run.server:
                    errors[-1] += "\n  server log: " + run.server.log_tail()[-800:]
                failures += errors
        finally:
            if run:
                run.cleanup()
        totals["examples"] += len(examples)
        totals["run"] += ran
        per_file[rel] = (ran, len(examples))
        if examples:
            print(f"{rel}: {ran} of {len(examples)} examples run", flush=True)

    n, r = totals["examples"], totals["run"]
    readme = per_file.get("README.md", (0, 0))
    print(f"examples: {n}, run: {r} ({100 * r / max(n, 1):.0f}%; README.md {readme[0]} of "
          f"{readme[1]}), outputs compared: {totals['compared']}, skipped: {totals['skipped']}")
    if failures:
        print("\nFAIL:\n" + "\n".join(failures), flush=True)
        sys.exit(1)
    print("PASS doc_examples_test")


if __name__ == "__main__":
    main()
