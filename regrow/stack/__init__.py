"""`regrow stack`: the local and swarm stacks from the command line, and the synth jobs they run."""
