# syntax=docker/dockerfile:1
# The `lode` binary in a slim image that runs as a non-root user.
#   docker build -t lode:0.1.0 .
# Build stage: the Rust toolchain, and libclang for RocksDB's bindgen.
FROM rust:1.95-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends libclang-dev clang \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p lode-node --bin lode \
    && install -m 0755 target/release/lode /usr/local/bin/lode

# Run stage: the binary and the C++ runtime RocksDB links against.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends libstdc++6 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 lode \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/lode --shell /usr/sbin/nologin lode \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/lode
COPY --from=build /usr/local/bin/lode /usr/local/bin/lode
USER 10001:10001
WORKDIR /var/lib/lode
EXPOSE 7000 7001 7002
ENTRYPOINT ["/usr/local/bin/lode"]
CMD ["--help"]
