"""The repository stage: its checkout, layout, wheelhouse, image and editable install, before any deletion."""
