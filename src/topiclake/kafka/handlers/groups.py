"""Consumer groups of the classic protocol (placeholder filled in below)."""
