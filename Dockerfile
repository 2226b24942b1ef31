# One image for every ira role: `ira worker --role ROLE` (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY ira ./ira
RUN pip install . \
 && useradd --system --uid 10001 --no-create-home ira

USER ira
# Inside a container the HTTP port must be reachable from the compose network (Prometheus,
# the other roles); publish it to the host on 127.0.0.1 only (docker-compose.yml does).
ENV IRA_HTTP_HOST=0.0.0.0 \
    IRA_HTTP_PORT=8080 \
    IRA_DATA_DIR=/tmp/ira
EXPOSE 8080
ENTRYPOINT ["ira"]
CMD ["worker", "--role", "gateway"]
