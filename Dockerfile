# sluice: a static binary on distroless, running as a non-root user.
#
#   docker build -t sluice:dev --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg REVISION=$(git rev-parse HEAD) .
#
# A release (.github/workflows/release.yml) builds it for linux/amd64 and
# linux/arm64 and pushes ghcr.io/sluice-rl/sluice:vX.Y.Z. Until the first
# release, build and push it yourself, with the version the examples and
# the chart name:
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=v0.1.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) -t ghcr.io/sluice-rl/sluice:v0.1.0 --push .
#   docker run -p 8080:8080 -p 8081:8081 \
#     -v "$PWD/examples/envoy/sluice:/srv/runtime_data/current/config:ro" sluice:dev
#
# The config is read where envoyproxy/ratelimit's image reads it:
# RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (by default
# /srv/runtime_data/current/config), or SLUICE_CONFIG when set.
#
# (Checked structurally by examples/examplestest; no Docker engine runs in
# the project's CI.)

FROM golang:1.26 AS build
WORKDIR /src
# Modules first: a code change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# The commit built: .git is not in the build context (.dockerignore), so
# Go cannot stamp it (sluice version, sluice_build_info).
ARG REVISION=
# Static (no cgo), reproducible paths, symbols stripped; timetzdata embeds
# the time-zone database, so time_zone rules work on any base image;
# vtprotobuf compiles go-control-plane's generated marshalers, which the
# gRPC codec uses for responses (internal/server/codec.go).
RUN CGO_ENABLED=0 go build -trimpath -tags timetzdata,vtprotobuf \
      -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o /out/sluice ./cmd/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
# The incumbent's path: Envoy Gateway's rate-limit Deployment runs
# /bin/ratelimit with no argument, Envoy AI Gateway's with its own: under that
# name it is `sluice ratelimit`, serve ignoring the arguments it does not define.
COPY --from=build /out/sluice /bin/ratelimit
# No SLUICE_CONFIG here: it would override the RUNTIME_* variables of a
# deployment that swaps envoyproxy/ratelimit's image for this one.
# distroless "nonroot", numeric so Kubernetes can check runAsNonRoot.
USER 65532:65532
# HTTP (/healthcheck, /json, /metrics) and gRPC (rate-limit service, health).
EXPOSE 8080 8081
ENTRYPOINT ["/sluice", "serve"]
