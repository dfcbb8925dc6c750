"""The benchmarks behind `regrow bench`: each measures one part end to end and returns one JSON-ready dict."""
