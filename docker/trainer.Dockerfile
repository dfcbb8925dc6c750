# The trainer image: the service image plus the `train` extra, from the host's wheelhouse (no network).
# Its build context is .cache/wheelhouse-train alone (`make wheelhouse-train`), so the service images never carry torch.
# A GPU user points APP_IMAGE at a service image built on a CUDA base (BASE_IMAGE of docker/app.Dockerfile).
ARG APP_IMAGE=regrow/app:0.1.0
FROM ${APP_IMAGE}
USER root
COPY . /tmp/wheelhouse-train
# By name, not *.whl: the resolver takes one version of each, so a wheelhouse holding two cannot conflict.
RUN /opt/regrow/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q \
        --find-links /opt/regrow/wheelhouse --find-links /tmp/wheelhouse-train 'regrow[train]' \
 && /opt/regrow/venv/bin/pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check -q \
        /tmp/wheelhouse-train/demo-model/*.whl \
 && rm -rf /tmp/wheelhouse-train \
 && install -d -o agent -g agent /home/agent/runs
USER agent
