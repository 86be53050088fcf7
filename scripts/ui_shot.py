"""Screenshot a web page in headless Chromium after clicking on it, over the DevTools protocol.

    python scripts/ui_shot.py URL OUT.png [--click TEXT]... [--size 1500,1100] [--wait 15]

``--click TEXT`` clicks the first visible element whose own text is TEXT (a tab, a button), after the
page has settled; repeatable. Used by scripts/screenshots.sh for views a plain ``chromium
--screenshot`` cannot reach (MLflow's compare page opens on its parallel-coordinates tab).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

#: The centre of the first visible element whose own text is the argument (null if none).
FIND_JS = """(text => {
  const all = [...document.querySelectorAll('button, [role=tab], a, span, div, label')];
  const hit = all.find(e => e.offsetParent !== null && [...e.childNodes].some(
      n => n.nodeType === 3 && n.textContent.trim() === text));
  if (!hit) return null;
  const r = (hit.closest('button, [role=tab], a') || hit).getBoundingClientRect();
  return [r.x + r.width / 2, r.y + r.height / 2];
})(%s)"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _shoot(ws_url: str, url: str, out: Path, clicks: list[str], wait: float) -> list[str]:
    import websockets

    said = []
    async with websockets.connect(ws_url, max_size=2**28) as ws:
        ids = iter(range(1, 10**6))

        async def call(method: str, **params):
            i = next(ids)
            await ws.send(json.dumps({"id": i, "method": method, "params": params}))
            while True:
                msg = json.loads(await ws.recv())
                if msg.get("id") == i:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error']}")
                    return msg.get("result", {})

        await call("Page.enable")
        await call("Page.navigate", url=url)
        await asyncio.sleep(wait)
        for text in clicks:  # a real mouse click (tabs react to the press, not to element.click())
            found = await call("Runtime.evaluate", expression=FIND_JS % json.dumps(text), returnByValue=True)
            at = found.get("result", {}).get("value")
            if at:
                for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
                    await call("Input.dispatchMouseEvent", type=kind, x=at[0], y=at[1], button="left",
                               clickCount=0 if kind == "mouseMoved" else 1)
            said.append(f"click {text!r}: {'at %d,%d' % tuple(at) if at else 'NOT FOUND'}")
            await asyncio.sleep(wait / 2)
        shot = await call("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))
    return said


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("out", type=Path)
    ap.add_argument("--click", action="append", default=[])
    ap.add_argument("--size", default="1500,1100")
    ap.add_argument("--wait", type=float, default=15.0, help="seconds to let the page load (and after a click, half)")
    args = ap.parse_args()
    port = _free_port()
    profile = tempfile.mkdtemp(prefix="ui-shot-")
    browser = subprocess.Popen(
        [shutil.which("chromium") or "chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={args.size}", f"--remote-debugging-port={port}", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2))
                page = next(p for p in pages if p.get("type") == "page")
                break
            except (OSError, StopIteration, ValueError):
                if time.time() > deadline:
                    raise RuntimeError("chromium did not start")
                time.sleep(0.3)
        for line in asyncio.run(_shoot(page["webSocketDebuggerUrl"], args.url, args.out, args.click, args.wait)):
            print(line)
    finally:
        browser.terminate()
        browser.wait(timeout=20)
        shutil.rmtree(profile, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
