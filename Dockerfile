# syntax=docker/dockerfile:1
# The one toolgate image: `toolgate run` (the sidecar the injector adds), `toolgate inject`
# (the webhook the Helm chart deploys), and the offline tools. tests/dockerfile.rs checks
# the properties below, including that USER is the UID the injector and the chart use.

# --- build: the release binary, exactly the locked dependency versions ---------------------
FROM rust:1.95-slim-bookworm AS builder
WORKDIR /src
# build.rs: the binary's link settings (packed relocations, see the file).
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
# The demo embeds the example policies and keys (include_str!).
COPY examples ./examples
# The registry and target caches survive between builds (BuildKit); the binary is copied
# out of the cached target folder in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin toolgate \
    && install -D -m 0555 target/release/toolgate /out/toolgate

# --- run: glibc and CA certificates, no shell, no package manager ------------------------
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/toolgate /usr/local/bin/toolgate
# distroless's `nonroot`, numerically, so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# Agent traffic, admin (health, metrics), webhook.
EXPOSE 15100 15101 15443
ENTRYPOINT ["/usr/local/bin/toolgate"]
CMD ["run"]
