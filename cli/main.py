"""The ``plimsoll`` command: every command group's module, gathered."""

from __future__ import annotations

import typer

from cli import (
    catalogue,
    continuation,
    demo,
    documents,
    jobs,
    notices,
    retention,
    samples,
    service,
    tenants,
    usage,
    webhooks,
)

# rich_markup_mode=None: Click's plain help, which wraps the descriptions and keeps every option's name whole in
# 80 columns (rich's boxed tables cut them: `--max-input-to…`).
app = typer.Typer(
    help="Plimsoll: long LLM agent work that never overflows the model's context.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
for group in (jobs, continuation, notices, documents, catalogue, usage, samples, service, demo, retention):
    app.add_typer(group.app)
app.add_typer(tenants.app, name="tenant")
app.add_typer(webhooks.app, name="webhooks")
