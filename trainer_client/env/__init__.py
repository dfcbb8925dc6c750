"""The env server seen from the trainer: OpenEnv's WebSocket client, a gRPC one, the server pool, TRL's env class."""
