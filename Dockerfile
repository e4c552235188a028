# syntax=docker/dockerfile:1
# The Tessera operator image: `docker build -t tessera:0.1.0 .`
#
# Two stages on the same pinned Python base. The builder turns the project into a wheel and
# installs it, with exactly the pins of requirements.lock, into a virtualenv without pip;
# the final stage copies only that virtualenv. Every dependency ships as a binary wheel
# (--only-binary), so neither stage has or needs a compiler, and no cache is kept.
# Pin the base by digest as well in your own builds (python:3.11.14-slim-bookworm@sha256:...).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv --without-pip /opt/tessera
# Dependencies first: this layer is rebuilt only when the lock changes.
COPY requirements.lock ./
RUN pip --python /opt/tessera/bin/python install --no-deps --only-binary=:all: \
        -r requirements.lock
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
RUN pip wheel --no-deps --wheel-dir /tmp/wheels . \
    && pip --python /opt/tessera/bin/python install --no-deps /tmp/wheels/tessera_operator-*.whl \
    && /opt/tessera/bin/python -m compileall -q /opt/tessera/lib

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="tessera" \
      org.opencontainers.image.description="Kubernetes operator that places accelerator workloads on the best pool of a mixed GPU/TPU fleet." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/tessera-dev/tessera" \
      org.opencontainers.image.url="https://github.com/tessera-dev/tessera" \
      org.opencontainers.image.documentation="https://github.com/tessera-dev/tessera/tree/main/docs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="Tessera" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.14-slim-bookworm"
# A named account for the numeric user, so tools that look the user up find one; no home
# directory and no login: the root filesystem is read-only at run time.
RUN groupadd --system --gid 65532 tessera \
    && useradd --system --no-log-init --uid 65532 --gid 65532 --home-dir /nonexistent \
        --no-create-home --shell /usr/sbin/nologin tessera
COPY --from=builder /opt/tessera /opt/tessera
ENV PATH=/opt/tessera/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# /metrics and /healthz (tessera run --metrics-port).
EXPOSE 8080
ENTRYPOINT ["tessera", "run"]
