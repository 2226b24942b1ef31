"""Log sources: Loki over HTTP, and JSON-lines files (the embedded default)."""
