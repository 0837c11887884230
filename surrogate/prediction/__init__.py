"""From configurations to predictions: one, a table, or a table file."""
