# Switchboard in a small image: built from this repository, run as an unprivileged user,
# state in the /data volume. See docs/deploy.md.
#
#   docker build -t switchboard .
#   docker run -p 127.0.0.1:7070:7070 -v switchboard:/data switchboard
#
# The builder's toolchain: the locked dependencies need Rust 1.95 or later (rust:1 is newer).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p switchboard \
    && cp target/release/switchboard /switchboard

FROM debian:bookworm-slim
# ca-certificates: the providers' and platforms' TLS; git: workspace checkpoints; tmux: the
# relay's tmux members.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git tmux \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --uid 10001 switchboard \
    && mkdir -p /data /work && chown switchboard:switchboard /data /work
COPY --from=build /switchboard /usr/local/bin/switchboard
USER switchboard
ENV SWITCHBOARD_DATA_DIR=/data \
    SWITCHBOARD_LISTEN=0.0.0.0:7070 \
    SWITCHBOARD_DEFAULT_CWD=/work \
    XDG_CONFIG_HOME=/data/config
VOLUME ["/data"]
EXPOSE 7070
ENTRYPOINT ["switchboard"]
CMD ["serve"]
