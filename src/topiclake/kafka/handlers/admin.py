"""Admin extras (placeholder)."""
