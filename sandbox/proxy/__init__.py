"""The engine proxy: forwards only the Docker API calls sandboxes need, and refuses the rest."""
