"""Schedule selection: config spaces, fallback configs, tuning records."""
