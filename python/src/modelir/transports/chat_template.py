"""A model's Jinja chat template, loaded and rendered the way Hugging Face `apply_chat_template` renders it.

For an engine that has no chat route (sglang's native `/generate`), the conversation is rendered here with the
model's own template and tokenized by the engine. The rendering follows transformers' documented environment: a
`jinja2.sandbox.ImmutableSandboxedEnvironment` with `trim_blocks` and `lstrip_blocks` (and jinja2's default of
dropping the template's one trailing newline), the `loopcontrols` extension, the `raise_exception` global (it raises
a `TemplateError`), `strftime_now`, and a `tojson` filter that is Python's `json.dumps` with `ensure_ascii=False`
(not jinja2's HTML-escaping one); the template sees `messages`, `tools` (absent when there are none),
`add_generation_prompt`, `bos_token` and `eos_token`. A `tokenizer_config.json` holds the template as a string or as
a list of named templates (`[{"name": "default", "template": ...}, {"name": "tool_use", ...}]`: "tool_use" is
taken when tools are given and there is one, else "default"), and its special tokens as strings or as AddedToken
dicts (`{"__type": "AddedToken", "content": "<s>", ...}`).

jinja2 is the `chat-template` extra (`pip install 'modelir[chat-template]'`), imported only when a template is
loaded. Loading reads the file and compiles the template once; rendering is pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from modelir import errors
from modelir.v1 import errors_pb2

EXTRA_HINT = "install the `chat-template` extra: pip install 'modelir[chat-template]'"


class ChatTemplateError(ValueError):
    """A chat template that cannot be loaded (no jinja2, an unreadable or templateless file, a syntax error).
    `option` names the transport option at fault."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(problem)
        self.option = option


def _token_text(value: Any) -> str:
    """A special token as `tokenizer_config.json` spells it: a string, an AddedToken dict, or absent."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return ""


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # transformers' filter: json.dumps as Python writes it, not jinja2's HTML-safe `tojson`.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A model's chat templates by name ("default", and "tool_use" where the model has one) with its special
    tokens, compiled once (`load`)."""

    sources: Mapping[str, str]
    bos_token: str
    eos_token: str
    _compiled: Mapping[str, Any]

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        add_generation_prompt: bool = True,
    ) -> str:
        """The conversation as the template writes it. Raises `InvalidRequestError` when the template refuses it
        (its `raise_exception`, or any other error it raises while rendering)."""
        from jinja2.exceptions import TemplateError

        name = "tool_use" if tools and "tool_use" in self._compiled else "default"
        context: dict[str, Any] = {
            "messages": [dict(m) for m in messages],
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        if tools:  # transformers passes None without tools, and templates test `if tools`
            context["tools"] = [dict(t) for t in tools]
        try:
            return str(self._compiled[name].render(**context))
        # A template's own errors, and Python's from the expressions it evaluates (`'a' + 1`, a missing key):
        # either way this conversation cannot be rendered, which is the request's problem, typed.
        except (TemplateError, TypeError, ValueError, LookupError, AttributeError, ArithmeticError) as exc:
            raise errors.InvalidRequestError(
                [errors_pb2.FieldViolation(field="conversation", description=f"the chat template refused it: {exc}")],
                message=f"the model's chat template refused the conversation: {exc}",
            ) from None


def _environment() -> Any:
    try:
        import jinja2.ext
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ChatTemplateError("chat_template", f"rendering a chat template needs jinja2: {EXTRA_HINT}") from None

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _named_templates(value: Any, where: str) -> dict[str, str]:
    """The templates of a `chat_template` value: one string ("default"), or the list of named ones."""
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, list) and all(
        isinstance(t, Mapping) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str) for t in value
    ):
        return {t["name"]: t["template"] for t in value}
    raise ChatTemplateError(where, f"{where}: `chat_template` is neither a string nor a list of named templates")


def _read_config(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ChatTemplateError("tokenizer_config", f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ChatTemplateError("tokenizer_config", f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ChatTemplateError("tokenizer_config", f"{path} is not a JSON object")
    return data


def load(tokenizer_config: str | None = None, chat_template: str | None = None) -> ChatTemplate | None:
    """The template from a `tokenizer_config.json` (its path) and/or a template's text (which wins over the
    file's); None when neither is given. Raises `ChatTemplateError` naming the option at fault."""
    if tokenizer_config is None and chat_template is None:
        return None
    config = _read_config(tokenizer_config) if tokenizer_config is not None else {}
    if chat_template is not None:
        sources, option = {"default": chat_template}, "chat_template"
    elif "chat_template" in config:
        sources, option = _named_templates(config["chat_template"], "tokenizer_config"), "tokenizer_config"
    else:
        raise ChatTemplateError(
            "tokenizer_config", f"{tokenizer_config} has no `chat_template`; give the template as `chat_template`"
        )
    if "default" not in sources:
        raise ChatTemplateError(option, f"no template is named 'default' (there are {', '.join(sorted(sources))})")
    env = _environment()
    from jinja2.exceptions import TemplateSyntaxError

    try:
        compiled = {name: env.from_string(text) for name, text in sources.items()}
    except TemplateSyntaxError as exc:
        raise ChatTemplateError(option, f"the chat template does not compile: {exc} (line {exc.lineno})") from None
    return ChatTemplate(
        sources=sources,
        bos_token=_token_text(config.get("bos_token")),
        eos_token=_token_text(config.get("eos_token")),
        _compiled=compiled,
    )
