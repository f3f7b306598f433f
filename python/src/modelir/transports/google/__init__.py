"""The Google Gemini family: the Gemini API (`genai`), its stream lift and the native parts both share."""

from modelir.transports.google.genai import PROVIDER_OPTION_KEYS, GoogleGenAI

__all__ = ["PROVIDER_OPTION_KEYS", "GoogleGenAI"]
