# The regrow service image (env server and synth job), built with no network from the host's wheelhouse.
# Few steps, and the settings ones first: on a slow storage driver (fuse-overlayfs) every step costs seconds, more the
# more layers it stands on (a settings step took 3.5 s on the base and 8 s on the finished image).
ARG BASE_IMAGE=regrow/base:0.1.0-r2
FROM ${BASE_IMAGE}
ENV PATH=/opt/regrow/venv/bin:$PATH \
    REGROW_SYNTH_FIND_LINKS='["/opt/regrow/wheelhouse"]' \
    REGROW_SYNTH_OFFLINE=1 \
    PYTHONUNBUFFERED=1
ENTRYPOINT ["regrow"]
CMD ["--help"]
WORKDIR /home/agent
COPY .cache/wheelhouse /opt/regrow/wheelhouse
# First the wheelhouse's pip: the one that resolved the set installs it (Debian's bundled pip is older).
# --no-compile: the step below removes every __pycache__ anyway, and compiling doubled this step (72 s -> 35 s).
RUN python3 -m venv /opt/regrow/venv \
 && /opt/regrow/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q --find-links /opt/regrow/wheelhouse --upgrade pip \
 && /opt/regrow/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q --no-compile /opt/regrow/wheelhouse/*.whl
# What changes with regrow's code, in one layer: its wheel, the demo repository and the trainer's package script.
COPY .cache/app-layer /opt/regrow/
# Named volumes mounted at /tasks, traces and runs start with these owners, so the services can write as `agent`.
RUN /opt/regrow/venv/bin/pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check -q --no-compile /opt/regrow/regrow-wheel/*.whl \
 && rm -rf /opt/regrow/regrow-wheel \
 && find /opt/regrow/venv -name __pycache__ -prune -exec rm -rf {} + \
 && install -d -o agent -g agent /tasks /home/agent/traces /home/agent/runs
USER agent
