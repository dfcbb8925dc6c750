# One repo image per repository and commit: its dependencies and the test tools, installed with no network.
# The venv belongs to agent so that validation sandboxes can install the workspace editable without root.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
USER root
COPY wheels /tmp/wheels
# The project's own wheel (wheels/own) is there only for a dependency that requires the project; uninstalled after,
# so that the image holds no copy of the source: each workspace installs it editable.
# The venv's seeded setuptools and Debian's ensurepip wheels go: they vendor copies of popular projects (a leak when
# the repository is one of them); the wheels reinstall setuptools when the project's build needs it.
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip uninstall -y -q --disable-pip-version-check setuptools \
 && rm -rf /usr/share/python-wheels \
 && /opt/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q --find-links /tmp/wheels \
    --find-links /tmp/wheels/own /tmp/wheels/*.whl \
 && for wheel in /tmp/wheels/own/*.whl; do [ -e "$wheel" ] || continue; \
      /opt/venv/bin/pip uninstall -y -q --disable-pip-version-check "$(basename "$wheel" | cut -d- -f1)" || exit 1; done \
 && rm -rf /tmp/wheels /root/.cache \
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} + \
 && chown -R agent:agent /opt/venv
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1
WORKDIR /workspace
USER agent
