"""The env server: regrow's tasks as OpenEnv episodes over HTTP, WebSocket and gRPC.

One action's path: app.py (OpenEnv's create_app, behind middleware.py) or grpc_server.py -> environment.py
(CodingEnvironment) -> lifecycle/runtime.py (the server's live episodes) -> stepping/episode.py (Stepper.take_step)
-> stepping/tools.py (sandbox), or on submit grading/submission.py (fresh sandboxes, pristine tests, checks)
-> stepping/recorder.py, which feeds observability/ (metrics, live stats, event log) and traces/ (SQLite).
"""
