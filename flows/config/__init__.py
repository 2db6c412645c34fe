"""The pipeline config: a pydantic schema, validated once at load. No data-plane imports."""
