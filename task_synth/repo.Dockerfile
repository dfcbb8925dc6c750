# One repo image per repository and dependency set, in two stages, installed with no network:
# - build: the dependencies, the test tools and what the build needs; the baseline installs the workspace editable
#   in it once, as agent (the venv is agent's), and captures the files the install adds;
# - task: the image every task runs in, without pip and the build-only tools (they vendor popular projects, a leak
#   when the repository is one of them); the captured install is written in instead of running pip.
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS build
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

FROM build AS task
USER root
COPY build_tools.py wheels/build-only.txt /tmp/strip/
COPY wheels/own /tmp/strip/own/
RUN removed="$(/opt/venv/bin/python /tmp/strip/build_tools.py /tmp/strip/build-only.txt /tmp/strip/own)" \
 && if [ -n "$removed" ]; then /opt/venv/bin/python -m pip uninstall -y -q --disable-pip-version-check $removed; fi \
 && rm -rf /tmp/strip /root/.cache \
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} +
USER agent
