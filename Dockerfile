# syntax=docker/dockerfile:1
# devicestate: one image for every process (watch, worker, api, alerts, recovery, enforce, replay),
# used by docker-compose.yml and by the Kubernetes manifests in deploy/ under the same name,
# devicestate (tag: the project's version). tests/kubeapi/test_dockerfile.py checks this file
# statically.
#
#   docker build -t devicestate:0.1.0 .
#
# Multi-stage: the first stage builds wheels of the project and all its dependencies; the runtime
# stage installs only those wheels (no compiler, no build tools, no pip cache) and runs as an
# unprivileged user with a numeric UID, so Kubernetes' runAsNonRoot can verify it. At run time
# only two places are written: the worker's RocksDB directory under /var/lib/devicestate (owned by
# that user, so a Docker volume mounted there starts writable) and /tmp; the manifests mount both
# as emptyDirs and keep the root filesystem read-only.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY services ./services
COPY streams ./streams
COPY migrations ./migrations
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 devicestate \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin devicestate \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/devicestate
# Only the wheels built above (--no-index): the image holds exactly what the build resolved.
# The migrations travel inside the wheel (package "migrations").
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels devicestate
WORKDIR /tmp
USER 10001:10001
ENV HOME=/tmp \
    DEVICESTATE_WORKER_DATA_DIR=/var/lib/devicestate/worker \
    DEVICESTATE_LOG_FORMAT=json \
    DEVICESTATE_API_HOST=0.0.0.0
# api 8080; Prometheus: watcher 9107, worker 9108, alerts 9109, recovery 9110, enforce 9111.
EXPOSE 8080 9107 9108 9109 9110 9111
ENTRYPOINT ["devicestate"]
CMD ["--help"]
