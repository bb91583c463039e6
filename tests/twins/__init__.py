"""Family twins: tiny models arranged like the real families (test-only)."""
