"""The pipeline config: a pydantic schema, validated once at load. No data-plane imports: what the config
describes for the data plane is built by the assembly (``dpstream.flows.assembly.inputs``)."""
