"""What you do in a sandbox: the `Sandbox` Protocol, the Docker sandbox, and the in-memory one for tests."""
