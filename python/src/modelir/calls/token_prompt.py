"""A token-in conversation made ready to run: the engine's renders fetched, the prompt assembled, then lowered.

`transports.token_prompt` says which renders a conversation with token turns needs and builds the token-id prompt
from them; the transport says which engine calls make them (`HttpTransport.token_prompt_steps`). This module is
the I/O between the two: it sends each round's calls through the model's executor under the call's deadline, then
lowers the request that runs (the token-id prompt on the engine's completion route).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelir.pipeline.prepare import Prepared
from modelir.transports import token_prompt
from modelir.transports.base import SHAPE_ERRORS, HttpTransport, shape_error

if TYPE_CHECKING:
    from modelir.model import Model


async def resolve(model: Model, prepared: Prepared, deadline: float | None, *, stream: bool = False) -> Prepared:
    """`prepared` (a token-in conversation, not lowered yet) as the token-id request it runs as, lowered. Raises
    `InvalidRequestError` naming the turn where the model's template is not prefix-preserving."""
    transport = model.transport
    assert isinstance(transport, HttpTransport) and model.executor is not None
    plan = token_prompt.plan(prepared.request)
    steps = transport.token_prompt_steps(plan)
    try:
        natives = next(steps)
        while True:
            answers = [
                (
                    await model.executor.send(
                        native, error_from=model._error_mapping, deadline=deadline, observe=model.limiter.observe
                    )
                ).response
                for native in natives
            ]
            natives = steps.send(answers)
    except StopIteration as done:
        rendered, sentinels = done.value
    except SHAPE_ERRORS as exc:
        raise model._redacted(shape_error(transport, exc)) from exc
    prompt = token_prompt.assemble(prepared.request, plan, rendered, sentinels)
    request = token_prompt.token_request(prepared.request, prompt)
    return Prepared(request, prepared.warnings, transport.lower(request, stream=stream))


def needs_resolving(model: Model, prepared: Prepared) -> bool:
    """Whether `prepared` waits for its token-id prompt (as its HTTP transport says: a token-in conversation, or
    one that asks for token ids where the chat route would not report the prompt's, `runs_as_token_prompt`)."""
    return (
        prepared.native is None
        and isinstance(model.transport, HttpTransport)
        and model.transport.runs_as_token_prompt(prepared.request)
    )
