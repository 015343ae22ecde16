# A golang image made locally (tools/docker/base-images.sh): a Debian base plus the Go
# toolchain of this machine, which is the build context (GOROOT). Laid out like the official
# golang image: Go in /usr/local/go, GOPATH /go.
ARG BASE_IMAGE=otel-valgen-local/bookworm:latest
FROM ${BASE_IMAGE}
COPY . /usr/local/go
ENV GOPATH=/go \
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /go
