"""Multi-reward functions: each returns K named rewards plus the verifier text block per reward."""
