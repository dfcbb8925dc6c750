"""The repository stage: its checkout, layout, wheelhouse, image and editable install (prepared_repo.py), before any
deletion."""
