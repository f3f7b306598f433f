"""Streams of IR events: folding them into a `Response` and back (`fold`), and coalescing deltas (`coalesce`)."""
