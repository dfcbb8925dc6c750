# The trainer image: the service image plus the `train` extra, from the host's wheelhouse (no network).
ARG APP_IMAGE=regrow/app:0.1.0
FROM ${APP_IMAGE}
USER root
COPY .cache/wheelhouse-train /opt/regrow/wheelhouse-train
RUN /opt/regrow/venv/bin/pip install --no-index --find-links /opt/regrow/wheelhouse --find-links /opt/regrow/wheelhouse-train \
        --no-cache-dir 'regrow[train]' \
 && rm -rf /opt/regrow/wheelhouse-train
USER agent
