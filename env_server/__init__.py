"""The env server: regrow's tasks as OpenEnv episodes over HTTP, WebSocket and gRPC.

One action's path: app.py (OpenEnv's create_app) or grpc_server.py -> environment.py (CodingEnvironment)
-> episodes.py (EpisodeRuntime.play) -> tools.py (sandbox) or reward.py (fresh sandbox, pristine tests)
-> trace_store.py (SQLite) and metrics.py (Prometheus).
"""
