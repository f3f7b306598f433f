"""The eight programs in `examples/` run as a user runs them (a subprocess, warnings as errors), against the reference
model or a local fake OpenAI server the test starts; each is shorter than its twin in `examples/openai_sdk/`, and
the twins that the fake can serve run too.
"""

from __future__ import annotations

import ast
import asyncio
import io
import os
import re
import subprocess
import sys
import threading
import tokenize
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from aiohttp import web
from modelir.records.files import read_records

from tests.fake_openai import FakeOpenAI

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PROGRAMS = ["rl_rollout", "bits_per_byte", "classify", "reasoning_replay", "many_requests", "streaming", "records"]
WITHOUT_TWIN = ["token_in_rollout"]  # no OpenAI API takes a turn as token ids: nothing to compare it with
ON_FAKE = {"many_requests", "streaming", "records"}  # the rest run on the reference model


class CountingFake(FakeOpenAI):
    """The fake, also counting how many requests it serves at once."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = self.peak = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await super().handle(request)
        finally:
            self.in_flight -= 1


class _FakeThread:
    """A fake server on its own loop in a thread, for the whole module's subprocesses."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def start(self) -> CountingFake:
        async def up() -> CountingFake:
            fake = CountingFake()
            fake.delay = 0.005  # long enough for requests to overlap, so the limit is visible
            return await fake.__aenter__()

        return asyncio.run_coroutine_threadsafe(up(), self.loop).result()

    def stop(self, fakes: list[CountingFake]) -> None:
        for fake in fakes:
            asyncio.run_coroutine_threadsafe(fake.__aexit__(None, None, None), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def _run(path: Path, fake: CountingFake | None, workdir: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MODELIR_"))}
    if fake is not None:
        env |= {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-fake"}
    args = [sys.executable, "-W", "error", str(path)] + ([str(workdir)] if path.stem == "records" else [])
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=90, cwd=workdir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every runnable program at once (they are independent): name -> (result, fake, workdir)."""
    server = _FakeThread()
    jobs = [(f"examples/{p}", EXAMPLES / f"{p}.py") for p in PROGRAMS + WITHOUT_TWIN]
    jobs += [(f"openai_sdk/{p}", EXAMPLES / "openai_sdk" / f"{p}.py") for p in sorted(ON_FAKE)]
    fakes = {name: server.start() for name, path in jobs if path.stem in ON_FAKE}
    workdirs = {name: tmp_path_factory.mktemp(name.replace("/", "_")) for name, _ in jobs}
    try:
        with ThreadPoolExecutor(len(jobs)) as pool:
            futures = {name: pool.submit(_run, path, fakes.get(name), workdirs[name]) for name, path in jobs}
            yield {name: (future.result(), fakes.get(name), workdirs[name]) for name, future in futures.items()}
    finally:
        server.stop(list(fakes.values()))


def _ok(runs, name: str) -> tuple[str, str, CountingFake | None, Path]:
    result, fake, workdir = runs[name]
    assert result.returncode == 0, f"{name} failed:\n{result.stderr}"
    for bad in ("Traceback", "Unclosed", "Warning", "unclosed"):
        assert bad not in result.stderr, f"{name} wrote {bad!r} to stderr:\n{result.stderr}"
    return result.stdout, result.stderr, fake, workdir


def test_rl_rollout(runs):
    out, *_ = _ok(runs, "examples/rl_rollout")
    assert re.search(r"^turn 0: tool_calls, \d+ tokens, 1 tool calls$", out, re.M), out
    assert re.search(r"^turn 1: (stop|length), \d+ tokens, 0 tool calls$", out, re.M), out
    total = int(re.search(r"rollout: (\d+) sampled tokens", out).group(1))
    per_turn = sum(int(n) for n in re.findall(r"^turn \d: \w+, (\d+) tokens", out, re.M))
    assert total == per_turn > 0


def test_token_in_rollout(runs):
    out, *_ = _ok(runs, "examples/token_in_rollout")
    turns = re.findall(r"^turn (\d): prompt (\d+) ids, sampled \[([\d, ]+)\]$", out, re.M)
    assert [int(t) for t, _, _ in turns] == [0, 1, 2, 3], out
    prompts = [int(p) for _, p, _ in turns]
    sampled = [len(ids.split(", ")) for _, _, ids in turns]
    assert all(later > earlier + taken for earlier, taken, later in zip(prompts, sampled, prompts[1:], strict=False))
    # The stop string's token is in the sampled ids, not in the text: the text round trip parts from token-in.
    final = re.search(
        r"^final prompt: (\d+) ids token-in, (\d+) after a text round trip; they part at id (\d+)$", out, re.M
    )
    assert final is not None, out
    assert int(final.group(1)) > int(final.group(2)) and int(final.group(3)) > prompts[0]


def test_bits_per_byte(runs):
    out, *_ = _ok(runs, "examples/bits_per_byte")
    per_doc = [float(x) for x in re.findall(r"^\s*([\d.]+) bits/byte  ", out, re.M)]
    total = float(re.search(r"([\d.]+) bits/byte over the corpus \(181 bytes\)", out).group(1))
    assert len(per_doc) == 4 and min(per_doc) <= total <= max(per_doc)


def test_classify(runs):
    out, *_ = _ok(runs, "examples/classify")
    lines = out.strip().splitlines()
    assert len(lines) == 3
    for line in lines:
        probabilities = {k: float(v) for k, v in re.findall(r"(positive|negative|neutral) ([\d.]+)", line)}
        assert set(probabilities) == {"positive", "negative", "neutral"}
        assert abs(sum(probabilities.values()) - 1) < 0.02
        assert line.split()[0] == max(probabilities, key=probabilities.__getitem__)


def test_reasoning_replay(runs):
    out, *_ = _ok(runs, "examples/reasoning_replay")
    assert "1 artifact(s) from reference/modelir-reference-1" in out
    assert "(the replayed artifact was accepted)" in out


@pytest.mark.parametrize("name", ["examples/many_requests", "openai_sdk/many_requests"])
def test_many_requests(runs, name):
    out, _, fake, _ = _ok(runs, name)
    assert out.startswith("200 answers, 800 output tokens"), out
    assert len(fake.requests) == 200
    assert 1 < fake.peak <= 16, f"{fake.peak} requests in flight at once"


@pytest.mark.parametrize("name", ["examples/streaming", "openai_sdk/streaming"])
def test_streaming(runs, name):
    out, err, fake, _ = _ok(runs, name)
    assert out == "Hello world!\n"
    assert "(stop, input 7, output 4)" in err
    assert err.count("\x1b[K") >= 4, "the progress line is redrawn as the stream arrives"
    assert fake.requests[0][1]["stream"] is True


def test_records(runs):
    out, _, _fake, workdir = _ok(runs, "examples/records")
    assert re.findall(r"^(#\d+) gpt-4o-mini via openai_chat ", out, re.M) == ["#0", "#1", "#2"]  # positions
    records = list(read_records(workdir / "answers.jsonl"))
    assert [r.provenance.transport for r in records] == ["openai_chat"] * 3
    assert all(r.provenance.start_time.seconds and r.provenance.sdk_version for r in records)
    assert [r.response.choices[0].message.parts[0].text for r in records] == ["Hello world!"] * 3


def test_openai_sdk_records(runs):
    out, *_ = _ok(runs, "openai_sdk/records")
    assert len(re.findall(r"^[0-9a-f]{24} gpt-4o-mini via openai ", out, re.M)) == 3


def code_lines(path: Path) -> int:
    """Lines with code: not blank, not only a comment, not part of a docstring."""
    source = path.read_text()
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    code = {
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        and token.type != tokenize.ENDMARKER
    }
    return len(code - docstrings)


@pytest.mark.parametrize("program", PROGRAMS)
def test_shorter_than_the_openai_sdk(program):
    ours, theirs = code_lines(EXAMPLES / f"{program}.py"), code_lines(EXAMPLES / "openai_sdk" / f"{program}.py")
    assert ours < theirs, f"{program}: {ours} lines with modelir, {theirs} with the openai SDK"


def test_the_examples_readme_states_the_current_line_counts():
    table = re.findall(r"^\| (\w+) \| (\d+) \| (\d+) \|", (EXAMPLES / "README.md").read_text(), re.M)
    stated = {name: (int(ours), int(theirs)) for name, ours, theirs in table}
    counted = {p: (code_lines(EXAMPLES / f"{p}.py"), code_lines(EXAMPLES / "openai_sdk" / f"{p}.py")) for p in PROGRAMS}
    assert stated == counted


def _readme_snippets() -> list[str]:
    readme = (EXAMPLES.parent / "README.md").read_text()
    section = readme[readme.index("## Using the SDK") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


async def test_the_readme_sdk_snippets_run_as_written(tmp_path):
    snippets = _readme_snippets()
    assert len(snippets) == 4
    async with FakeOpenAI() as fake:  # the real-provider snippet talks to it through OPENAI_BASE_URL
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        env |= {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-fake"}
        for number, snippet in enumerate(snippets):
            script = tmp_path / f"snippet_{number}.py"
            script.write_text(snippet)
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-W", "error", str(script), env=env, stdout=-1, stderr=-1
            )
            out, err = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0 and not err, f"README snippet {number}:\n{snippet}\n{err.decode()}"
            assert out
    assert len(fake.requests) == 4


if __name__ == "__main__":  # the line counts for the record: python -m tests.test_examples
    for program in PROGRAMS:
        ours, theirs = code_lines(EXAMPLES / f"{program}.py"), code_lines(EXAMPLES / "openai_sdk" / f"{program}.py")
        total = len((EXAMPLES / f"{program}.py").read_text().splitlines())
        total_theirs = len((EXAMPLES / "openai_sdk" / f"{program}.py").read_text().splitlines())
        print(
            f"{program:18} modelir {ours:3} code lines ({total:3} total)   openai {theirs:3} ({total_theirs:3} total)"
        )
