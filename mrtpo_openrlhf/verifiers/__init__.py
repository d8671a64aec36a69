"""Plain verifiers (no OpenRLHF import): SQL execution, instruction constraints, tool calls."""
