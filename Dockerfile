# cairn on Debian 12 with the same Debian packages the build uses.
FROM debian:12 AS build
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN sh scripts/deps.sh
COPY . .
RUN make -j2 && make install PREFIX=/usr/local

FROM debian:12
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libpq5 libcjson1 libcurl4 libsodium23 libmicrohttpd12 libsystemd0 curl ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home --shell /usr/sbin/nologin cairn
COPY --from=build /usr/local/bin/cairn /usr/local/bin/cairn-worker /usr/local/bin/
USER cairn
# Listening on every interface needs the address other runners reach this
# one at: set CAIRN_ADVERTISE_ADDR (docker-compose.yml sets it per service).
ENV CAIRN_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["cairn-worker"]
