"""The reference the ingest benchmark is measured against: FastAPI -> Redis SET NX -> aiokafka.

No auth, no parsing, no normalization: each request claims a fresh key and produces its
body with ``send_and_wait`` (acks=all), like the raw chain the sources issue quotes
(~3,000 requests/s on one uvicorn worker). Served by ``bench/ingest.py`` with
``uvicorn --factory bench.raw_chain:create_app``; configured by RAW_REDIS_URL, RAW_KAFKA,
RAW_TOPIC.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaProducer
from fastapi import FastAPI, Request, Response
from redis.asyncio import Redis


def create_app() -> FastAPI:
    """Read the environment and connect in the lifespan (nothing happens at import)."""
    redis_url, bootstrap, topic = os.environ["RAW_REDIS_URL"], os.environ["RAW_KAFKA"], os.environ["RAW_TOPIC"]
    clients: dict[str, object] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        clients.update(redis=Redis.from_url(redis_url), producer=producer)
        yield
        await producer.stop()

    app = FastAPI(lifespan=lifespan)

    @app.post("/raw")
    async def raw(request: Request) -> Response:
        body = await request.body()
        redis, producer = clients["redis"], clients["producer"]
        if await redis.set(f"raw:{uuid.uuid4().hex}", b"1", nx=True, px=900_000):  # type: ignore[attr-defined]
            await producer.send_and_wait(topic, body, key=b"raw")  # type: ignore[attr-defined]
        return Response(b'{"accepted":1}', status_code=202, media_type="application/json")

    return app
