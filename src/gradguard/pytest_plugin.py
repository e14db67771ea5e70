"""pytest plugin (placeholder while issue 3 is in progress)."""
