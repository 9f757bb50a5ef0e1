"""Target descriptors (YAML, validated by schema.json): the only place where a target's facts live."""
