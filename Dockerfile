# The image of every parley process (coordinator, worker, api): `make image`, then
# `docker run --rm parley:<version> --version`. The builder turns the source into a wheel
# and installs it with its dependencies into a virtualenv; the runtime stage copies that
# virtualenv alone: no compilers, no pip cache, no source tree.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The wheel is built from these alone (tests/e2e/test_wheel_demo.py builds the same one).
COPY pyproject.toml README.md ./
COPY parley parley
COPY coordinator coordinator
COPY workers workers
COPY shared shared
# pip's cache stays outside the image (BuildKit), so a change to the source does not
# download every dependency again.
RUN --mount=type=cache,target=/root/.cache/pip \
    pip wheel --no-deps --wheel-dir /dist . \
 && python -m venv /opt/parley \
 && /opt/parley/bin/pip install /dist/*.whl
# The example rooms, for `parley run examples/rooms/...` in a container; -L resolves
# examples/rooms/demo.yaml, a link to the package's own copy.
COPY examples examples
RUN cp -rL examples /examples

FROM ${PYTHON_IMAGE}
# LITELLM_LOCAL_MODEL_COST_MAP: litellm would fetch its cost map over the network at import.
# PARLEY_HEALTH_HOST: the health port must answer from outside the container (probes).
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    PARLEY_LOG_FORMAT=json \
    PARLEY_HEALTH_HOST=0.0.0.0 \
    PATH=/opt/parley/bin:$PATH
RUN groupadd --system --gid 10001 parley \
 && useradd --system --uid 10001 --gid parley --create-home --home-dir /home/parley parley
COPY --from=builder /opt/parley /opt/parley
COPY --from=builder --chown=parley:parley /examples /home/parley/examples
# Numeric, so Kubernetes' runAsNonRoot can check it; Celery warns when run as root.
USER 10001:10001
WORKDIR /home/parley
# The image fails to build when the installed command does not start.
RUN parley --version
# 8700 the api, 8701 a coordinator's health port, 8702 a worker's.
EXPOSE 8700 8701 8702
# Coordinators release their leases and exit 0 on SIGTERM; workers shut down warm.
STOPSIGNAL SIGTERM
ENTRYPOINT ["parley"]
CMD ["--help"]
