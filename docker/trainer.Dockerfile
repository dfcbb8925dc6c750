# The trainer image: the service image plus the `train` extra, from the host's wheelhouse (no network).
# Its build context is .cache/wheelhouse-train alone (`make wheelhouse-train`), so the service images never carry torch.
# A GPU user points APP_IMAGE at a service image built on a CUDA base (BASE_IMAGE of docker/app.Dockerfile).
# It needs BuildKit (Compose v2, or DOCKER_BUILDKIT=1): the engine's built-in Dockerfile frontend has RUN --mount.
ARG APP_IMAGE=regrow/app:0.1.0
FROM ${APP_IMAGE}
USER root
# The wheels (3.3 GB with CUDA torch) are mounted, never copied: a COPY layer would stay in the image after `rm`.
# By name, not *.whl: the resolver takes one version of each, so a wheelhouse holding two cannot conflict.
RUN --mount=type=bind,target=/tmp/wheelhouse-train \
    /opt/regrow/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q \
        --find-links /opt/regrow/wheelhouse --find-links /tmp/wheelhouse-train 'regrow[train]' \
 && /opt/regrow/venv/bin/pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check -q \
        /tmp/wheelhouse-train/demo-model/*.whl \
 && install -d -o agent -g agent /home/agent/runs
USER agent
