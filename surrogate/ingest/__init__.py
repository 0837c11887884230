"""Parsers that turn what real tools write (logs, tables) into the project's tables."""
