# One repo image per repository and dependency set, in two stages, installed with no network:
# - build: the dependencies, the test tools and what the build needs; the baseline installs the workspace editable
#   in it once, as agent (the venv is agent's), and captures the files the install adds;
# - task: the image every task runs in, without pip and the build-only tools (they vendor popular projects, a leak
#   when the repository is one of them); the captured install is written in instead of running pip.
ARG BASE_IMAGE
FROM ${BASE_IMAGE} AS build
USER root
# The settings first, and no label (each container is labelled when it is made): the classic builder commits a layer
# for every step, 4 to 6 s each on a slow storage driver.
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1
WORKDIR /workspace
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
 && mkdir -p /opt/venv/.strip/own && cp /tmp/wheels/strip/* /opt/venv/.strip/ \
 && { cp /tmp/wheels/own/*.whl /opt/venv/.strip/own/ 2>/dev/null || true; } \
 && rm -rf /tmp/wheels /root/.cache \
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} + \
 && chown -R agent:agent /opt/venv
USER agent

# One step, as agent (who owns the venv), with what the build stage set aside in /opt/venv/.strip: each step costs
# seconds on a slow storage driver (fuse-overlayfs: about 6 s a step).
FROM build AS task
RUN removed="$(python /opt/venv/.strip/build_tools.py /opt/venv/.strip/build-only.txt /opt/venv/.strip/own)" \
 && if [ -n "$removed" ]; then python -m pip uninstall -y -q --disable-pip-version-check $removed; fi \
 && rm -rf /opt/venv/.strip \
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} +
