"""Playing episodes: the agent loop, chat formatting and tokens, the samplers, the stream of finished groups."""
