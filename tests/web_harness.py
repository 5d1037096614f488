"""The web page in a test: uvicorn in the test's event loop on a free loopback
port, and the system's Chromium (Debian's ``chromium``) driven by Playwright.

Never a browser Playwright downloads: ``executable_path`` is the system's, and
a machine without it fails with how to install it (``make test`` does).
"""

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator

import uvicorn
from playwright.async_api import Browser, async_playwright

from local_redis import eventually
from taskiq_fanin.web import Settings, build_app

#: Where Debian's ``chromium`` package puts the browser.
CHROMIUM = "/usr/bin/chromium"


def chromium_path() -> str:
    """The system's Chromium, or a failure that says how to install it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise AssertionError(
            "the web page's tests need the system's Chromium: "
            "sudo apt-get install chromium (make test installs it)"
        )
    return found


@contextlib.asynccontextmanager
async def web_server(settings: Settings) -> AsyncIterator[str]:
    """Serve the page on a free loopback port; yield its base URL."""
    config = uvicorn.Config(
        build_app(settings),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        await eventually(
            lambda: server.started or serving.done(), what="uvicorn to start"
        )
        if serving.done():
            serving.result()  # raises what stopped it
        (port,) = {s.getsockname()[1] for srv in server.servers for s in srv.sockets}
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=10)


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless system Chromium."""
    path = chromium_path()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=path, headless=True)
        try:
            yield browser
        finally:
            await browser.close()
