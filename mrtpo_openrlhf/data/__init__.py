"""Dataset rows (JSONL) and the small fixtures shipped with the package."""
