"""Screenshot a web page in headless Chromium after clicking on it, over the DevTools protocol.

    python scripts/ui_shot.py URL OUT.png [ACTION]... [--size 1500,1100] [--wait 15]

After the page has settled (``--wait`` seconds) the actions run in the order given, each repeatable:

``--click TEXT``   a real mouse click on the first visible element whose own text is TEXT (a tab, a
                   button), waiting up to ``--wait`` seconds for it to appear; ``--click-optional
                   TEXT`` the same, without complaint when it never appears (a panel that may be shut)
``--eval JS``      evaluates JS in the page (e.g. ``localStorage.setItem(...)``); its value is printed
``--reload``       reloads the page and lets it settle again (``--wait``)
``--key KEY``      presses a key (``Escape``, ``Enter``, ``Tab``)
``--type TEXT``    types TEXT into the focused element
``--sleep S``      waits S seconds
``--drag "DX SEL"`` drags the centre of the first visible element matching CSS selector SEL by DX pixels
                   to the right (a column header's resize handle: a wider column)

Used by scripts/screenshots.sh for views a plain ``chromium --screenshot`` cannot reach (MLflow's
compare page opens on its parallel-coordinates tab; the runs table's columns live in localStorage).
The exit status is 1 when a ``--click`` found nothing or an ``--eval`` threw (the PNG is still written).
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
  const all = [...document.querySelectorAll('button, [role=tab], a, span, div, label, li, p')];
  const hit = all.find(e => e.offsetParent !== null && [...e.childNodes].some(
      n => n.nodeType === 3 && n.textContent.trim() === text));
  if (!hit) return null;
  const r = (hit.closest('button, [role=tab], a, li') || hit).getBoundingClientRect();
  return [r.x + r.width / 2, r.y + r.height / 2];
})(%s)"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


KEYS = {"Escape": 27, "Enter": 13, "Tab": 9}


async def _shoot(ws_url: str, url: str, out: Path, actions: list[tuple[str, str]], wait: float) -> tuple[list[str], bool]:
    import websockets

    said, ok = [], True
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

        async def key(name: str) -> None:
            code = KEYS.get(name, 0)
            for kind in ("keyDown", "keyUp"):
                await call("Input.dispatchKeyEvent", type=kind, key=name, code=name, windowsVirtualKeyCode=code,
                           nativeVirtualKeyCode=code)

        await call("Page.enable")
        await call("Page.navigate", url=url)
        await asyncio.sleep(wait)
        for kind, arg in actions:
            if kind in ("click", "click-optional"):  # a real mouse click (tabs react to the press, not to element.click())
                at, until = None, time.time() + wait
                while True:
                    found = await call("Runtime.evaluate", expression=FIND_JS % json.dumps(arg), returnByValue=True)
                    at = found.get("result", {}).get("value")
                    if at or time.time() > until:
                        break
                    await asyncio.sleep(0.5)
                if at:
                    for ev in ("mouseMoved", "mousePressed", "mouseReleased"):
                        await call("Input.dispatchMouseEvent", type=ev, x=at[0], y=at[1], button="left",
                                   clickCount=0 if ev == "mouseMoved" else 1)
                    await asyncio.sleep(min(wait / 2, 5))
                elif kind == "click":
                    ok = False
                said.append(f"{kind} {arg!r}: {'at %d,%d' % tuple(at) if at else 'not found'}")
            elif kind == "eval":
                res = await call("Runtime.evaluate", expression=arg, returnByValue=True, awaitPromise=True)
                if "exceptionDetails" in res:
                    ok = False
                    said.append(f"eval: ERROR {res['exceptionDetails'].get('exception', {}).get('description', res['exceptionDetails'])}")
                else:
                    said.append(f"eval: {json.dumps(res.get('result', {}).get('value'))[:3000]}")
            elif kind == "reload":
                await call("Page.reload", ignoreCache=False)
                await asyncio.sleep(wait)
                said.append("reload")
            elif kind == "key":
                await key(arg)
                await asyncio.sleep(1)
                said.append(f"key {arg}")
            elif kind == "type":
                await call("Input.insertText", text=arg)
                await asyncio.sleep(1)
                said.append(f"type {arg!r}")
            elif kind == "drag":
                dx, sel = arg.split(" ", 1)
                found = await call("Runtime.evaluate", returnByValue=True, expression=(
                    "(s => { const e = [...document.querySelectorAll(s)].find(e => e.getClientRects().length);"
                    " if (!e) return null; const r = e.getBoundingClientRect();"
                    " return [r.x + r.width / 2, r.y + r.height / 2]; })(%s)" % json.dumps(sel)))
                at = found.get("result", {}).get("value")
                if at:
                    x, y = at
                    await call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
                    await call("Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button="left", clickCount=1)
                    for i in range(1, 11):
                        await call("Input.dispatchMouseEvent", type="mouseMoved", x=x + float(dx) * i / 10, y=y,
                                   button="left", buttons=1)
                        await asyncio.sleep(0.05)
                    await call("Input.dispatchMouseEvent", type="mouseReleased", x=x + float(dx), y=y, button="left",
                               clickCount=1)
                    await asyncio.sleep(1)
                else:
                    ok = False
                said.append(f"drag {sel!r} by {dx}: {'from %d,%d' % tuple(at) if at else 'NOT FOUND'}")
            elif kind == "sleep":
                await asyncio.sleep(float(arg))
        shot = await call("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))
    return said, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("out", type=Path)
    for flag in ("click", "click-optional", "eval", "key", "type", "sleep", "drag"):
        ap.add_argument(f"--{flag}", dest="actions", action="append", type=lambda v, f=flag: (f, v), default=[],
                        metavar=flag.split("-")[0].upper())
    ap.add_argument("--reload", dest="actions", action="append_const", const=("reload", ""))
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
        said, ok = asyncio.run(_shoot(page["webSocketDebuggerUrl"], args.url, args.out, args.actions, args.wait))
        for line in said:
            print(line)
    finally:
        browser.terminate()
        browser.wait(timeout=20)
        shutil.rmtree(profile, ignore_errors=True)
    print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
