"""The candidate stage: the units a repository offers for deletion, and the deletions themselves (AST, import fixes)."""
