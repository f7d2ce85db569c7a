# syntax=docker/dockerfile:1
# trainguard image: static /trainguard (webhook, controller, CLI) and
# /trainguard-agent (copied into training pods by the injected init container).
# `make docker-image` builds it with a Docker engine; `make image` writes the
# same two binaries as an image archive without one (hack/image.sh).
# The release number comes from the source (internal/foundations/version/appversion.go).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
ARG COMMIT=
WORKDIR /src
# Dependencies first, so source edits reuse the module layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static binaries (no cgo) for a distroless base; -trimpath and -s -w keep
# build paths and symbols out of the image.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X github.com/trainguard/trainguard/internal/foundations/version.Commit=${COMMIT}" \
      -o /out/trainguard ./cmd/trainguard && \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w" \
      -o /out/trainguard-agent ./cmd/trainguard-agent

# distroless/static: no shell, no package manager, CA certificates and
# /etc/passwd for the nonroot user only.
FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/trainguard /trainguard
COPY --from=build /out/trainguard-agent /trainguard-agent
# Numeric, so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/trainguard"]
