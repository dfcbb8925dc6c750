"""The env server: regrow's tasks as OpenEnv episodes over HTTP, WebSocket and gRPC.

One action's path: app.py (OpenEnv's create_app, behind middleware.py) or grpc_server.py -> environment.py
(CodingEnvironment) -> lifecycle/runtime.py (the server's live episodes) -> stepping/episode.py (Stepper.take_step)
-> stepping/tools.py (sandbox), or on submit grading/submission.py (fresh sandboxes, pristine tests, checks)
-> stepping/recorder.py, which feeds observability/ (metrics, live stats, event log) and traces/ (SQLite).
"""

from proto.openenv_types import leave_out_openenv_web_ui

leave_out_openenv_web_ui()  # before any module of the server imports openenv.core, which would load gradio
