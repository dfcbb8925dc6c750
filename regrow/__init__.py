"""regrow: the command line that ties the parts together."""
