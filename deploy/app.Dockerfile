# The regrow service image (env server and synth job), built with no network from the host's wheelhouse.
ARG BASE_IMAGE=regrow/base:0.1.0-r2
FROM ${BASE_IMAGE}
COPY .cache/wheelhouse /opt/regrow/wheelhouse
# First the wheelhouse's pip: the one that resolved the set installs it (Debian's bundled pip is older).
# --no-compile: the step below removes every __pycache__ anyway, and compiling doubled this step (72 s -> 35 s).
RUN python3 -m venv /opt/regrow/venv \
 && /opt/regrow/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q --find-links /opt/regrow/wheelhouse --upgrade pip \
 && /opt/regrow/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q --no-compile /opt/regrow/wheelhouse/*.whl
COPY .cache/regrow-wheel /tmp/regrow-wheel
RUN /opt/regrow/venv/bin/pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check -q --no-compile /tmp/regrow-wheel/*.whl \
 && rm -rf /tmp/regrow-wheel \
 && find /opt/regrow/venv -name __pycache__ -prune -exec rm -rf {} +
COPY tests/fixtures/minilib /opt/regrow/demo-repo
# Named volumes mounted here start with these owners, so the services can write as `agent`.
COPY deploy/train-packages.sh /opt/regrow/train-packages.sh
RUN install -d -o agent -g agent /tasks /home/agent/traces /home/agent/runs
ENV PATH=/opt/regrow/venv/bin:$PATH \
    REGROW_SYNTH_FIND_LINKS='["/opt/regrow/wheelhouse"]' \
    REGROW_SYNTH_OFFLINE=1 \
    PYTHONUNBUFFERED=1
USER agent
WORKDIR /home/agent
ENTRYPOINT ["regrow"]
CMD ["--help"]
