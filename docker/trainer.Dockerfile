# The trainer image: the service image plus the `train` extra, from the host's wheelhouse (no network).
ARG APP_IMAGE=regrow/app:0.1.0
FROM ${APP_IMAGE}
USER root
COPY .cache/wheelhouse-train /tmp/wheelhouse-train
RUN /opt/regrow/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q \
        --find-links /opt/regrow/wheelhouse /tmp/wheelhouse-train/*.whl \
 && rm -rf /tmp/wheelhouse-train
USER agent
