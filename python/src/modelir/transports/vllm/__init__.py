"""vLLM's OpenAI-compatible server: one transport (`transport`) routing raw prompts to the completions endpoint
(`completions`) and conversations to the chat endpoint (`chat`), with vLLM's extensions (`dialect`), its streamed
sampled ids (`token_ids`) and its prompt logprobs as input scores (`prompt_scores`)."""

from modelir.transports.vllm.dialect import MAX_LOGPROBS, PROVIDER_OPTION_KEYS
from modelir.transports.vllm.transport import VLLM

__all__ = ["MAX_LOGPROBS", "PROVIDER_OPTION_KEYS", "VLLM"]
