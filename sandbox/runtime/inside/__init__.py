"""Python the runtime runs inside a container with the image's own python3, so it uses the standard library alone."""
