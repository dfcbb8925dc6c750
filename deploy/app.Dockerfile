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
# uv installs the set (pip took 38 s for it), run from its own wheel: a venv without pip skips ensurepip (6 s); pip
# comes from the wheelhouse, for the synth job's `pip wheel`. uv compiles nothing.
# --no-deps: the wheelhouse is a resolved set less what only openenv's web interface needs (deploy/trim_wheelhouse.py).
RUN python3 -m zipfile -e /opt/regrow/wheelhouse/uv-*.whl /tmp/uv \
 && uv=$(echo /tmp/uv/uv-*.data/scripts/uv) && chmod +x "$uv" \
 && python3 -m venv --without-pip /opt/regrow/venv \
 && "$uv" pip install --python /opt/regrow/venv/bin/python --no-index --no-cache --no-deps -q /opt/regrow/wheelhouse/*.whl \
 && rm -rf /tmp/uv
# What changes with regrow's code, in one layer: its wheel, the demo repository and the trainer's package script.
COPY .cache/app-layer /opt/regrow/
# The services run as agent and cannot write bytecode: what their commands import is compiled here, once (importing
# the server took 11.5 s uncompiled at every start, 2.8 s compiled); compiling the whole venv took twice as long.
# Named volumes mounted at /tasks, traces and runs start with these owners, so the services can write as `agent`.
RUN /opt/regrow/venv/bin/uv pip install --python /opt/regrow/venv/bin/python --no-index --no-deps --no-cache -q /opt/regrow/regrow-wheel/*.whl \
 && rm -rf /opt/regrow/regrow-wheel \
 && /opt/regrow/venv/bin/python -c "import regrow.cli, env_server.server, env_server.app, task_synth.pipeline, sandbox.proxy.server" \
 && install -d -o agent -g agent /tasks /home/agent/traces /home/agent/runs
USER agent
