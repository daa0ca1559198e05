# cairn on Debian 12 with the same Debian packages the build uses.
FROM debian:12 AS build
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN sh scripts/deps.sh
COPY . .
RUN make -j2 && make install PREFIX=/usr/local

# The runtime: only the libraries the binaries link (the list dpkg-shlibdeps
# gives the cairn package), ca-certificates and curl for the health check.
# The user is numeric and fixed (10001), so Kubernetes can check runAsNonRoot
# from the image and the manifests of deploy/kubernetes name the same ids.
FROM debian:12
COPY scripts/deps.sh /tmp/deps.sh
RUN sh /tmp/deps.sh --runtime \
    && rm -rf /var/lib/apt/lists/* /tmp/deps.sh \
    && groupadd --gid 10001 cairn \
    && useradd --uid 10001 --gid cairn --no-create-home --shell /usr/sbin/nologin cairn
COPY --from=build /usr/local/bin/cairn /usr/local/bin/cairn-worker /usr/local/bin/
USER 10001:10001
# Listening on every interface needs the address other runners reach this
# one at: set CAIRN_ADVERTISE_ADDR (docker-compose.yml sets it per service).
ENV CAIRN_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["cairn-worker"]
