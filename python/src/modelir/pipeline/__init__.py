"""The request pipeline: every check a request passes before any I/O, and the order they run in.

`prepare` runs them (field validation, capabilities, the foreign-artifact policy, media URIs) and lowers;
`validation`, `capabilities`, `content_kinds`, `artifacts`, `media_policy`, `needs` and `continuations` are its
steps and the registries they read.
"""
