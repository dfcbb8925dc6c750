"""What people look at: the live dashboard (`/dashboard`) and the episode viewer (`/episodes/{id}/view`).

Server-rendered HTML (Jinja2) with one small script shipped in the package; no build step, no extra service.
"""
