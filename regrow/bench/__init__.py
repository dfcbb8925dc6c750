"""`regrow bench`: its command line (cli.py, options.py, report.py, gpu_check.py) and the benchmarks behind it, each
of which measures one part end to end and returns one JSON-ready dict."""
