"""The request pipeline: every check a request passes before any I/O, and the order they run in.

`prepare` runs them (media URIs, field validation, capabilities, the foreign-artifact policy) and lowers; `survey`
walks the request's conversation once for all of them; `validation`, `capabilities`, `content_kinds`, `artifacts`,
`media_policy`, `needs` and `continuations` are its steps and the registries they read.
"""
