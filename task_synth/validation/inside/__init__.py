"""Python that synthesis ships into a repository's sandbox: pytest plugins, scripts and a stand-in's body, read by path.

They run with the repository's own interpreter, where regrow is not installed, so they use the standard library alone
(and pytest or coverage, which every repository image carries).
"""
