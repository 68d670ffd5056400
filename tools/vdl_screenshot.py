"""Screenshot VisualDL's page for a run's logs, in headless Chromium (Debian package 'chromium').

  python tools/vdl_screenshot.py --logdir output/movielens_dense/vdl --out docs/images/visualdl_scalars.png
"""
from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--lang=en-US"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:  # VisualDL's index answers only requests that carry Accept-Language
            request = urllib.request.Request(url, headers={"Accept-Language": "en-US"})
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"error: VisualDL did not answer at {url} within {seconds:.0f} s")


def filtered_copy(logdir: Path, pattern: str, out: Path) -> Path:
    """The scalar and text records of ``logdir`` whose tags match ``pattern``, in a new log under ``out``
    (VisualDL renders every chart of a group at once; a page of hundreds of charts stalls headless Chromium)."""
    from visualdl import LogReader, LogWriter

    regex = re.compile(pattern)
    with LogWriter(logdir=str(out)) as writer:
        for path in sorted(logdir.glob("vdlrecords*")):
            reader = LogReader(file_path=str(path))
            tags = reader.get_tags()
            for tag in tags.get("scalar", []):
                if regex.search(tag):
                    for record in reader.get_data("scalar", tag):
                        writer.add_scalar(tag, record.value, record.id)
            for tag in tags.get("text", []):
                if regex.search(tag):
                    for record in reader.get_data("text", tag):
                        writer.add_text(tag, record.text.encoded_text_string, record.id)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--out", required=True, help="PNG file to write")
    parser.add_argument("--page", default="scalar", choices=("scalar", "histogram", "text"))
    parser.add_argument("--size", default="1600,1300", help="window width,height")
    parser.add_argument("--wait-ms", type=int, default=20000, help="virtual time the page gets to render")
    parser.add_argument("--timeout", type=int, default=180, help="seconds chromium may take in all")
    parser.add_argument("--tags", default=r"^sparse/embeddings\.(user_id|item_id)/",
                        help="regular expression of the tags to show ('' for all)")
    args = parser.parse_args(argv)
    logdir = Path(args.logdir)
    if not any(logdir.glob("vdlrecords*")):
        raise SystemExit(f"error: no VisualDL records in {logdir}; train with monitor.enable=true first")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("error: no chromium on PATH; on Debian: apt-get install chromium")
    visualdl = shutil.which("visualdl", path=str(Path(sys.executable).parent)) or shutil.which("visualdl")
    if visualdl is None:
        raise SystemExit("error: no visualdl command; pip install visualdl==2.5.3")
    shown = Path(tempfile.mkdtemp(prefix="vdl-shown-"))
    if args.tags:
        logdir = filtered_copy(logdir, args.tags, shown)
    port = free_port()
    server = subprocess.Popen([visualdl, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/app/{args.page}", 60)
        out = Path(args.out).resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
            try:
                subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                f"--window-size={args.size}", f"--virtual-time-budget={args.wait_ms}",
                                f"--screenshot={out}", f"http://127.0.0.1:{port}/app/{args.page}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=args.timeout, check=False)
            except subprocess.TimeoutExpired:
                raise SystemExit(f"error: chromium took over {args.timeout} s; try a smaller --wait-ms") from None
        if not out.is_file():
            raise SystemExit(f"error: chromium wrote no screenshot to {out}")
        print(out)
    finally:
        shutil.rmtree(shown, ignore_errors=True)
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
