"""Feature-deletion task synthesis: repository -> validated, leak-free RL tasks with their images."""
