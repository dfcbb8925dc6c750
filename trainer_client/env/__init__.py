"""The env server seen from the trainer: the WebSocket and gRPC clients, and TRL's environment class."""
