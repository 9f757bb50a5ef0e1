"""Pass pipelines per opt level, tuning defaults and shipped tuning records (YAML)."""
