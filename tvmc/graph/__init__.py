"""Graph IR, printer, executor-JSON export and the test-only numpy interpreter."""
