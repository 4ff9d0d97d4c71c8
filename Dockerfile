# syntax=docker/dockerfile:1
# Build: the Swift toolchain image (Debian 12, like our machines, and the Swift 6.3 that
# scripts/run builds with) with the -dev packages.
FROM swift:6.3-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libmicrohttpd-dev libcurl4-openssl-dev libsqlite3-dev libvips-dev libjpeg-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Resolve dependencies in their own layer, so source edits do not refetch them.
COPY Package.swift ./
RUN swift package resolve
COPY Sources ./Sources
# The manifest names the test targets too (ThumbdTesting has a path of its own).
COPY Tests ./Tests
RUN swift build -c release --product thumbd --static-swift-stdlib \
 && install -D "$(swift build -c release --show-bin-path)/thumbd" /out/thumbd

# Run: slim Debian 12 with only the runtime libraries.
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libmicrohttpd12 libcurl4 libsqlite3-0 libvips42 libjpeg62-turbo libstdc++6 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /var/lib/thumbd --create-home thumbd
COPY --from=build /out/thumbd /usr/local/bin/thumbd
COPY config/thumbd.yaml /etc/thumbd/thumbd.yaml
USER thumbd
WORKDIR /var/lib/thumbd
# Inside a container the port must be reachable from outside the container's loopback;
# publish it on the host's loopback only: docker run -p 127.0.0.1:8080:8080 ...
ENV THUMBD_SERVER_LISTEN=0.0.0.0:8080 \
    THUMBD_STORE_PATH=/var/lib/thumbd/thumbd.sqlite
VOLUME /var/lib/thumbd
EXPOSE 8080
STOPSIGNAL SIGTERM
# Asks /healthz wherever server.listen points (the file, THUMBD_SERVER_LISTEN), not a fixed port.
HEALTHCHECK --interval=30s --timeout=5s CMD ["thumbd", "health", "--config", "/etc/thumbd/thumbd.yaml"]
ENTRYPOINT ["thumbd", "serve", "--config", "/etc/thumbd/thumbd.yaml"]
