# devicestate: one image for the watcher, the stream worker and the API (see docker-compose.yml).
# Multi-stage: wheels are built in the first stage; the runtime stage runs as a non-root user.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY services ./services
COPY streams ./streams
COPY migrations ./migrations
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /app devicestate
WORKDIR /app
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY alembic.ini ./
COPY migrations ./migrations
USER 10001
ENV DEVICESTATE_WORKER_DATA_DIR=/tmp/devicestate-worker \
    DEVICESTATE_LOG_FORMAT=json \
    DEVICESTATE_API_HOST=0.0.0.0
ENTRYPOINT ["devicestate"]
CMD ["--help"]
