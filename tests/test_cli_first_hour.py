"""The command line of the first hour: `generate` in the form the model takes (and saying which), `classify`,
defaults shown in `--help`, `--concurrency 0` refused, a progress line without stale characters, a connection
error in words, and `modelir conformance` without the repository's fixtures."""

from __future__ import annotations

import io
import json
import textwrap

import pytest
from modelir.batch.progress import Progress
from modelir.cli import build_parser, main
from modelir.conformance import runner


@pytest.fixture
def chat_only(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(
        textwrap.dedent(
            """
            models:
              chatty: {transport: reference, remove_capabilities: [COMPLETION]}
              unreachable: {transport: openai_chat, base_url: "http://127.0.0.1:9/v1", max_attempts: 1}
            """
        )
    )
    return str(config)


def test_generate_sends_a_chat_only_model_a_user_message_and_says_so(chat_only, capsys):
    assert main(["generate", "--config", chat_only, "--model", "chatty", "--max-tokens", "4", "Hello"]) == 0
    err = capsys.readouterr().err
    assert "[form] chat: the prompt went as a user message (chatty takes no raw prompts)" in err
    assert main(["generate", "--model", "reference", "--max-tokens", "4", "Hello"]) == 0
    assert "[form] completion: the prompt went as a raw prompt (reference takes raw prompts)" in capsys.readouterr().err
    assert main(["generate", "--model", "reference", "--chat", "--max-tokens", "4", "Hello"]) == 0
    assert "[form] chat: the prompt went as a user message (--chat)" in capsys.readouterr().err


def test_classify_prints_the_label_and_every_probability(capsys):
    argv = ["classify", "--model", "reference", "--labels", "positive,negative,neutral", "Sentiment: great film!"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    label, rest = out.strip().split("  ", 1)
    probabilities = dict(pair.split() for pair in rest.strip("()").split("  "))
    assert set(probabilities) == {"positive", "negative", "neutral"} and label in probabilities
    assert abs(sum(float(p) for p in probabilities.values()) - 1) < 0.01
    assert "[classify] method=" in err
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] == label


def test_classify_refuses_fewer_than_two_labels(capsys):
    assert main(["classify", "--model", "reference", "--labels", "yes", "Is it?"]) == 2
    assert "give at least two distinct, non-empty labels" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command, shown",
    [("generate", "the most tokens to generate (default: 256)"), ("serve", "(default: 30.0)"), ("run", "default: 8")],
)
def test_help_shows_the_defaults(command, shown):
    subparsers = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert shown in " ".join(subparsers[command].format_help().split())


def test_concurrency_zero_is_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "--model", "m", "--input", "i", "--output", "o", "--concurrency", "0"])
    assert exited.value.code == 2
    assert "--concurrency: expected at least 1, got 0" in capsys.readouterr().err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_leaves_no_stale_characters():
    screen = Terminal()
    progress = Progress(100, stream=screen)
    lines = iter(["done 1/100  ETA 10s", "done 2/100  ETA 8s"])
    progress.line = lambda: next(lines)  # type: ignore[method-assign]
    progress._last = -1.0
    progress.update(ok=True)
    progress._last = -1.0
    progress.update(ok=True)
    shown = ""
    for chunk in screen.getvalue().split("\r")[1:]:  # what a terminal shows after each carriage return
        shown = chunk + shown[len(chunk) :]
    assert shown.rstrip() == "done 2/100  ETA 8s"


def test_a_connection_error_is_said_in_words(chat_only, capsys):
    assert main(["generate", "--config", chat_only, "--model", "unreachable", "Hello"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == "modelir: PROVIDER_UNAVAILABLE: could not reach the provider: cannot connect to 127.0.0.1:9: " + (
        "Connection refused"
    )


def test_conformance_without_the_repository_says_where_the_fixtures_are(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(runner, "DEFAULT_FIXTURES", tmp_path / "absent")
    assert main(["conformance"]) == 2
    err = capsys.readouterr().err
    assert "not installed with the package" in err and "--fixtures" in err
    assert main(["conformance", "--fixtures", str(tmp_path / "nope")]) == 2
    assert "not a folder of fixtures" in capsys.readouterr().err
