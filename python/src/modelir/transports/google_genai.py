"""The public import path of the Gemini transport (`modelir.transports.google_genai`); see `google.genai`."""

from modelir.transports.google.genai import PROVIDER_OPTION_KEYS, GoogleGenAI

__all__ = ["PROVIDER_OPTION_KEYS", "GoogleGenAI"]
