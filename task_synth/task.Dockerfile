# One thin task image: the deleted workspace (a single-commit git repository), installed editable, caches purged.
ARG REPO_IMAGE
FROM ${REPO_IMAGE}
USER root
COPY --chown=1000:1000 workspace /workspace
RUN pip install --no-deps --no-build-isolation --disable-pip-version-check -q -e /workspace \
 && find /workspace -depth \( -name "*.egg-info" -o -name build -o -name dist \) -prune -exec rm -rf {} + \
 && find /workspace /opt/venv /root /home/agent /tmp -depth \( -name __pycache__ -o -name "*.pyc" -o -name .mypy_cache \
      -o -name .pytest_cache -o -name .ruff_cache -o -name .hypothesis -o -name .coverage -o -name ".coverage.*" -o -name .tox -o -name .nox \) \
      -prune -exec rm -rf {} + \
 && rm -rf /root/.cache /home/agent/.cache \
 && chown -R agent:agent /workspace
USER agent
WORKDIR /workspace
