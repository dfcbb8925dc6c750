"""What an exported Harbor task carries into its verifier: run by the task image's own Python, standard library only
(and pytest, which every repository image has)."""
