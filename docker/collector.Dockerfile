# The otel-valgen collector distribution (otelcol-valgen), built from the same builder
# manifest and script as `make collector` (collector/builder-config.yaml, collector/build.sh),
# so the image and the local binary contain the same components.
#
# Build from the repository root:
#   docker build -f docker/collector.Dockerfile -t otel-valgen/collector:0.1.0 .
# Base images are pinned by tag; pin them by digest in production (see docs/deployment.md).
# Both are build args, so that a machine without a registry can pass images of its own (the
# tests pass images made by tools/docker/base-images.sh). The runtime image needs `sh` and
# `wget` (the health check).
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG RUNTIME_IMAGE=alpine:3.22.2

FROM ${GO_IMAGE} AS build
WORKDIR /src
# A static binary, so that the runtime image needs no C library of a given version. The module
# and build caches are cache mounts at fixed paths, reused by every later build on this engine.
ENV CGO_ENABLED=0 \
    GOMODCACHE=/root/go/pkg/mod \
    GOCACHE=/root/.cache/go-build
COPY collector/ collector/
RUN --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    bash collector/build.sh

FROM ${RUNTIME_IMAGE}
# wget (busybox's on alpine) serves the health check; nothing else is added to the base image.
# The user is written to /etc/passwd directly, which works on alpine and Debian alike.
RUN echo 'valgen:x:10001:' >>/etc/group \
    && echo 'valgen:x:10001:10001:otel-valgen collector:/nonexistent:/sbin/nologin' >>/etc/passwd \
    && mkdir -p /var/lib/otelcol-valgen/state /var/lib/otelcol-valgen/files \
    && chown -R valgen:valgen /var/lib/otelcol-valgen
COPY --from=build /src/build/otelcol-valgen /usr/local/bin/otelcol-valgen
COPY collector-config/ /etc/otelcol-valgen/
COPY --chmod=0755 docker/collector-entrypoint.sh /usr/local/bin/collector-entrypoint
# Inside a container the collector must listen on every interface of its own network
# namespace; which host addresses reach it is decided by the published ports (compose
# publishes on 127.0.0.1 only). The persistent queue ($VALGEN_STATE_DIR/queue) and the file
# output are volumes; the directories exist here, owned by the collector's user, so that a
# new named volume mounted on them is writable.
ENV VALGEN_OTLP_GRPC_ENDPOINT=0.0.0.0:4317 \
    VALGEN_OTLP_HTTP_ENDPOINT=0.0.0.0:4318 \
    VALGEN_HEALTH_ENDPOINT=0.0.0.0:13133 \
    VALGEN_METRICS_HOST=0.0.0.0 \
    VALGEN_STATE_DIR=/var/lib/otelcol-valgen/state \
    VALGEN_FILE_PATH=/var/lib/otelcol-valgen/files/valgen.jsonl
USER 10001:10001
WORKDIR /var/lib/otelcol-valgen
VOLUME ["/var/lib/otelcol-valgen/state", "/var/lib/otelcol-valgen/files"]
EXPOSE 4317 4318 13133 8888
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:13133/"]
# The entrypoint warns about deprecated variables (VALGEN_WANDB_EXPORTER_*), then execs otelcol-valgen.
ENTRYPOINT ["/usr/local/bin/collector-entrypoint"]
CMD ["--config", "/etc/otelcol-valgen/collector.yaml"]
