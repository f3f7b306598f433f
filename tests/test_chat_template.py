"""Rendering with a model's chat template (`transports/chat_template.py`) as Hugging Face `apply_chat_template` does:
a ChatML template in Qwen2.5's shape and one in Llama-3's, written here, against the strings transformers gives for
them; the environment's documented behaviour (trim_blocks, lstrip_blocks, the dropped trailing newline, tojson,
raise_exception, loop controls); `tokenizer_config.json` in its forms; and the typed errors."""

from __future__ import annotations

import builtins
import json

import pytest
from modelir import errors
from modelir.transports import chat_template
from modelir.transports.chat_template import ChatTemplateError

# Qwen2.5's template in short (no tools branch): its default system prompt when the conversation has none.
QWEN = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. '\n"
    "        + 'You are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'system' and loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)
# Llama-3's template as its tokenizer_config.json has it: BOS from `bos_token`, the content trimmed.
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
CHAT = [{"role": "system", "content": "You add."}, {"role": "user", "content": "2+3? "}]


def test_a_qwen_chatml_template_renders_as_transformers_does():
    template = chat_template.load(chat_template=QWEN)
    assert template is not None
    assert template.render(CHAT) == (
        "<|im_start|>system\nYou add.<|im_end|>\n<|im_start|>user\n2+3? <|im_end|>\n<|im_start|>assistant\n"
    )
    assert template.render(CHAT[1:], add_generation_prompt=False) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n2+3? <|im_end|>\n"
    )


def test_a_llama3_template_writes_the_bos_token_from_the_tokenizer_config(tmp_path):
    config = tmp_path / "tokenizer_config.json"
    config.write_text(
        json.dumps(
            {
                "chat_template": LLAMA3,
                "bos_token": "<|begin_of_text|>",
                "eos_token": {"__type": "AddedToken", "content": "<|eot_id|>", "lstrip": False, "special": True},
            }
        )
    )
    template = chat_template.load(str(config))
    assert template is not None and template.eos_token == "<|eot_id|>"
    assert template.render(CHAT) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou add.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n2+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_the_environment_trims_blocks_and_drops_the_one_trailing_newline():
    source = (
        "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n"
    )
    template = chat_template.load(chat_template=source)
    assert template is not None
    # trim_blocks eats the newline after a block, lstrip_blocks the indentation before one; jinja2 drops the
    # template's final newline (keep_trailing_newline is off in transformers' environment)
    assert template.render(CHAT) == "[2+3? ]\n"


def test_tojson_is_json_dumps_unescaped_and_loop_controls_work():
    source = (
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ m | tojson }}{% endfor %}"
        "{{ tools | tojson(indent=1) if tools }}"
    )
    template = chat_template.load(chat_template=source)
    assert template is not None
    messages = [*CHAT, {"role": "user", "content": "é <b>&</b>"}]
    tools = [{"type": "function", "function": {"name": "add"}}]
    assert template.render(messages, tools=tools) == (
        '{"role": "user", "content": "2+3? "}{"role": "user", "content": "é <b>&</b>"}' + json.dumps(tools, indent=1)
    )


def test_named_templates_take_tool_use_with_tools_and_default_without(tmp_path):
    config = tmp_path / "tokenizer_config.json"
    named = [{"name": "default", "template": "plain"}, {"name": "tool_use", "template": "tools: {{ tools | length }}"}]
    config.write_text(json.dumps({"chat_template": named}))
    template = chat_template.load(str(config))
    assert template is not None
    assert template.render(CHAT) == "plain"
    assert template.render(CHAT, tools=[{"type": "function"}]) == "tools: 1"
    # the option's text wins over the file's templates
    override = chat_template.load(str(config), "mine")
    assert override is not None and override.render(CHAT, tools=[{}]) == "mine"


def test_raise_exception_in_a_template_is_an_invalid_request():
    template = chat_template.load(chat_template="{{ raise_exception('Conversation roles must alternate') }}")
    assert template is not None
    with pytest.raises(errors.InvalidRequestError) as caught:
        template.render(CHAT)
    assert "Conversation roles must alternate" in caught.value.message
    assert [v.field for v in caught.value.violations] == ["conversation"]


def test_the_sandbox_refuses_what_a_template_may_not_do():
    template = chat_template.load(chat_template="{{ messages.append(1) }}")
    assert template is not None
    with pytest.raises(errors.InvalidRequestError):
        template.render(CHAT)  # ImmutableSandboxedEnvironment: no mutation of what the caller passed


@pytest.mark.parametrize(
    ("config", "option", "fragment"),
    [
        ({"bos_token": "<s>"}, "tokenizer_config", "has no `chat_template`"),
        ({"chat_template": 3}, "tokenizer_config", "neither a string nor a list"),
        ({"chat_template": [{"name": "tool_use", "template": "x"}]}, "tokenizer_config", "no template is named"),
        ({"chat_template": "{% for %}"}, "tokenizer_config", "does not compile"),
    ],
)
def test_a_config_without_a_usable_template_names_the_option(tmp_path, config, option, fragment):
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ChatTemplateError) as caught:
        chat_template.load(str(path))
    assert caught.value.option == option and fragment in str(caught.value)


def test_an_unreadable_config_and_no_template_at_all(tmp_path):
    with pytest.raises(ChatTemplateError, match="cannot read"):
        chat_template.load(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ChatTemplateError, match="is not JSON"):
        chat_template.load(str(tmp_path / "bad.json"))
    assert chat_template.load() is None


def test_without_jinja2_the_error_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_jinja(name, *args, **kwargs):
        if name.startswith("jinja2"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_jinja)
    with pytest.raises(ChatTemplateError, match=r"pip install 'modelir\[chat-template\]'"):
        chat_template.load(chat_template=QWEN)
