# Debian's chromium, headless, driven over the DevTools protocol with the standard library only (a minimal WebSocket
# client): load a page, evaluate JavaScript in it, collect its console errors and requests, take a screenshot.
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

# Loopback only: nothing in the browser may reach out (updates, sync, QUIC, field trials).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
                  "--disable-breakpad", "--disable-crash-reporter", "--no-default-browser-check",
                  "--hide-scrollbars", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0"]


def find_chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


class WebSocket:
    """Text frames over one TCP connection, as RFC 6455 has them (client frames masked)."""

    def __init__(self, url, timeout):
        assert url.startswith("ws://"), url
        host_port, _, path = url[len("ws://"):].partition("/")
        host, _, port = host_port.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection during the handshake")
            response += chunk
        head, _, self.buffered = response.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:200]!r}")

    def send(self, text):
        payload = text.encode()
        header = bytes([0x81])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _read(self, n):
        while len(self.buffered) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection")
            self.buffered += chunk
        data, self.buffered = self.buffered[:n], self.buffered[n:]
        return data

    def receive(self):
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(length)
            opcode = first & 0x0F
            if opcode == 0x8:
                raise ConnectionError("the browser closed the DevTools connection")
            if opcode in (0x9, 0xA):   # ping, pong: not ours to answer for a short session
                continue
            message += payload
            if first & 0x80:
                return message.decode()

    def close(self):
        self.sock.close()


class Browser:
    """One headless chromium with a fresh profile, and a DevTools session on its first page."""

    def __init__(self, width=1280, height=1600, timeout=30):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="canopy-chromium-")
        self.process = subprocess.Popen(
            [find_chromium()] + CHROMIUM_FLAGS + [f"--user-data-dir={self.profile}",
                                                  f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not open its DevTools port: {self.process.stderr.read()[:2000]!r}")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as answer:
            pages = [t for t in json.load(answer) if t["type"] == "page"]
        self.socket = WebSocket(pages[0]["webSocketDebuggerUrl"], timeout)
        self.next_id = 0
        self.events = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.receive())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for_event(self, method):
        deadline = time.monotonic() + self.timeout
        seen = 0
        while time.monotonic() < deadline:
            for event in self.events[seen:]:
                if event.get("method") == method:
                    return event
            seen = len(self.events)
            self.events.append(json.loads(self.socket.receive()))
        raise TimeoutError(f"no {method} within {self.timeout} s")

    def load(self, path):
        self.call("Page.navigate", url=Path(path).resolve().as_uri())
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating {expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self):
        """Everything the page reported as an error: console errors, uncaught exceptions, log entries."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url', '')})")
        return found

    def requested_urls(self):
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path, height=None):
        """A PNG of the page's top (all of it when height is None)."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], height or size["height"]),
                "scale": 1}
        shot = self.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)
        Path(path).write_bytes(base64.b64decode(shot["data"]))

    def close(self):
        if getattr(self, "socket", None):
            try:
                self.call("Browser.close")
            except (OSError, ConnectionError, RuntimeError):
                pass
            self.socket.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=10)
        # Helpers that left the process group (crashpad, zygotes) still name the profile on their command line.
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            try:
                if self.profile.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, 9)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)
