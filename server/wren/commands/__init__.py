"""Subcommands of the `wren` CLI."""
