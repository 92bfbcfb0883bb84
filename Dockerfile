# Build stage: a static, CGO-free binary.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY sdk/go/go.mod sdk/go/go.sum ./sdk/go/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/leasegate .

# Runtime stage: distroless, no shell, runs as the unprivileged nonroot user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/leasegate /leasegate
USER nonroot:nonroot
ENV LEASEGATE_LISTEN=0.0.0.0:8080
EXPOSE 8080
# "leasegate healthcheck" GETs /healthz on the port of LEASEGATE_LISTEN and exits 0 or 1 (over
# HTTPS when LEASEGATE_TLS_CERT_FILE is set).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/leasegate", "healthcheck"]
ENTRYPOINT ["/leasegate"]
