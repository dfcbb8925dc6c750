# The regrow service image (env server and synth job), built with no network from the host's wheelhouse.
ARG BASE_IMAGE=regrow/base:0.1.0
FROM ${BASE_IMAGE}
COPY .cache/wheelhouse /opt/regrow/wheelhouse
RUN python3 -m venv /opt/regrow/venv \
 && /opt/regrow/venv/bin/pip install --no-index --find-links /opt/regrow/wheelhouse --no-cache-dir regrow \
 && find /opt/regrow/venv -name __pycache__ -prune -exec rm -rf {} +
COPY tests/fixtures/minilib /opt/regrow/demo-repo
# Named volumes mounted here start with these owners, so the services can write as `agent`.
RUN install -d -o agent -g agent /tasks /home/agent/traces
ENV PATH=/opt/regrow/venv/bin:$PATH \
    REGROW_SYNTH_WHEELHOUSE=/opt/regrow/wheelhouse \
    PYTHONUNBUFFERED=1
USER agent
WORKDIR /home/agent
ENTRYPOINT ["regrow"]
CMD ["--help"]
