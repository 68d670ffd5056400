"""The service on a free local port in a thread, and a JSON client of it, for the service's tests."""
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request

import uvicorn

from paddle_edo.serving.redis_server import free_port


@contextlib.contextmanager
def serving(app):
    """Run ``app`` with uvicorn on 127.0.0.1 until the block ends; yields its base URL; the shutdown must be clean."""
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    for _ in range(200):
        if uv.started:
            break
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
    assert not thread.is_alive()  # a clean shutdown


def call(url, path, body=None, raw=None):
    """(status, JSON answer) of a GET (no body) or a POST of ``body`` as JSON (or ``raw`` bytes)."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
