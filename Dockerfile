FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True
WORKDIR /app
COPY pyproject.toml README.md ./
COPY parley parley
COPY coordinator coordinator
COPY workers workers
COPY shared shared
COPY examples examples
RUN pip install --no-cache-dir .
# Coordinators exit 0 on SIGTERM after releasing their leases; workers shut down warm.
STOPSIGNAL SIGTERM
CMD ["parley", "--help"]
