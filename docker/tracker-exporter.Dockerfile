# The otel-valgen exporter service (`otel-valgen exporter`): receives the sampled generations
# from the collector over OTLP and writes them into their runs in wandb, MLflow, TensorBoard,
# ClearML and/or Trackio. (Formerly wandb-exporter.Dockerfile, image otel-valgen/wandb-exporter.)
#
# Build from the repository root:
#   docker build -f docker/tracker-exporter.Dockerfile -t otel-valgen/tracker-exporter:0.1.0 .
# The wandb API key is read from WANDB_API_KEY at run time; no key is ever baked in. Without
# a key the service writes offline runs (see tracker-exporter-entrypoint.sh).
# Base images are pinned by tag; pin them by digest in production (see docs/deployment.md).
# The base is a build arg, so that a machine without a registry can pass an image of its own
# (the tests pass one made by tools/docker/base-images.sh): any Debian-like image with
# `python` 3.11 and its venv module.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/exporter.lock requirements/
COPY pyproject.toml README.md ./
COPY otel_valgen/ otel_valgen/
# Exactly requirements/exporter.lock (`make lock`), hash-checked and never resolved again
# (--no-deps): a package released upstream after the lock was made cannot enter the image or
# break its build. The lock holds every dependency and extra its packages ask for (`pip check`
# confirms it) and the build backend, setuptools, which builds this package
# (--no-build-isolation). pip's download cache is a cache mount: later builds on this engine
# reuse it (every file is checked against the lock's hashes), and it stays out of the image.
RUN --mount=type=cache,target=/root/.cache/pip \
    python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-deps --require-hashes -r requirements/exporter.lock \
    && /opt/venv/bin/pip install --no-deps --no-build-isolation ".[exporter]" \
    && /opt/venv/bin/pip check

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 valgen \
    && useradd --system --uid 10001 --gid valgen --no-create-home --shell /usr/sbin/nologin valgen \
    && mkdir -p /var/lib/valgen-exporter \
    && chown valgen:valgen /var/lib/valgen-exporter
COPY --from=build /opt/venv /opt/venv
COPY --chmod=0755 docker/tracker-exporter-entrypoint.sh /usr/local/bin/tracker-exporter-entrypoint
# Everything wandb writes goes to the volume: the user has no home (wandb's staging files
# default to ~/.local/share/wandb, which the first run in a container found unwritable).
# Listen on every interface of the container's own network namespace; compose does not
# publish these ports, only the collector reaches them.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    WANDB_DIR=/var/lib/valgen-exporter \
    WANDB_CACHE_DIR=/var/lib/valgen-exporter/.cache \
    WANDB_CONFIG_DIR=/var/lib/valgen-exporter/.config \
    WANDB_DATA_DIR=/var/lib/valgen-exporter/.data
USER 10001:10001
WORKDIR /var/lib/valgen-exporter
VOLUME ["/var/lib/valgen-exporter"]
EXPOSE 4417 4418
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4418/healthz', timeout=2)"]
ENTRYPOINT ["/usr/local/bin/tracker-exporter-entrypoint"]
CMD ["--grpc", "0.0.0.0:4417", "--http", "0.0.0.0:4418", "--state-dir", "/var/lib/valgen-exporter/state"]
