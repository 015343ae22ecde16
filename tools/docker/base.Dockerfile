# The local Debian base (tools/docker/base-images.sh): the debootstrapped root filesystem plus
# the CA certificates this machine trusts beyond Debian's own (the build context).
ARG ROOTFS_IMAGE=otel-valgen-local/bookworm-rootfs:latest
FROM ${ROOTFS_IMAGE}
COPY . /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null
