"""Run the firmware under the MicroPython unix port against a xiaozhi server (the host simulation).

    python tools/sim/run.py --mic question.wav [--ota http://127.0.0.1:8000/xiaozhi/ota/ | --server ws://…]
                            [--out reply.wav] [--mode auto|manual] [--heap 160wk] [--turns 1]
                            [--codec pcm|opus]

With --ota the board boots like a stock device: OTA first, and against a server that pairs devices it
prints its pairing code and waits until it is approved (`wren devices approve CODE`); its state (client id)
is kept in .cache/sim/state.json, so it stays paired.

The firmware is the real app on the host hal: the mic WAV (16 kHz 16-bit mono) plays while the device
listens, the speaker writes --out, the button follows --button (default: press at 0.5 s; in manual mode
also release 0.3 s after the WAV ends). The heap is capped with `-X heapsize=<n>wk` (K words: sized like a
32-bit board). On exit the firmware's heap report is repeated: the peak of gc.mem_alloc() sampled every
audio frame (garbage included) and the live heap after each turn's gc.collect(), and the codec it used.

--codec pcm runs the app from source on the stock unix port (.venv/bin/micropython); --codec opus runs the
Wren build (`make firmware-host`: the opus module, the app frozen in), as `micropython -m main` with only
the frozen modules on its path; an Opus board accepts 24 kHz downlink audio by default (what Wren and
xiaozhi servers send as Opus).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIRMWARE = REPO / "firmware"
MICROPYTHON = Path(sys.executable).parent / "micropython"
WREN_BUILD = REPO / ".cache" / "firmware-host" / "micropython"  # make firmware-host
DEFAULT_HEAP = "160wk"


def build_env(workdir: Path, args: argparse.Namespace) -> dict[str, str]:
    cfg = {
        "wifi": [{"ssid": "sim", "password": ""}],
        "server_url": args.server,
        "ota_url": args.ota or "",
        "token": args.token or "",
        "listen_mode": args.mode,
        "volume": args.volume,
        "mac": args.mac,
        "board": "host-sim",
    }
    path = f"{FIRMWARE}:{FIRMWARE / 'hal' / 'host'}:{REPO}:.frozen"
    sounds = {}
    if args.codec == "opus":
        path = ".frozen"  # the Wren build has the app frozen in (its pairing-code sounds too)
    else:
        sounds = digit_sounds()
    (workdir / "config.json").write_text(json.dumps(cfg))
    button = args.button or ("press@0.5,release@eof" if args.mode == "manual" else "press@0.5")
    return {
        **os.environ,
        "MICROPYPATH": path,
        "WREN_SIM_CONFIG": str(workdir / "config.json"),
        "WREN_SIM_STATE": str(Path(args.state).resolve()) if args.state else str(workdir / "state.json"),
        "WREN_SIM_MIC": str(Path(args.mic).resolve()),
        "WREN_SIM_OUT": str(Path(args.out).resolve()),
        "WREN_SIM_BUTTON": button,
        "WREN_SIM_TURNS": str(args.turns),
        **sounds,
    }


def digit_sounds() -> dict[str, str]:
    """WREN_SIM_SOUNDS for the stock build: the ADPCM pairing-code sounds (tools/firmware/digit_sounds.py,
    cached), or nothing without piper here (the board then shows and logs its code only)."""
    cmd = [sys.executable, str(REPO / "tools" / "firmware" / "digit_sounds.py"), "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    made = [p for p in res.stdout.split() if p.endswith("digits-adpcm.wdg")]
    if res.returncode != 0 or not made:
        print("sim: no pairing-code sounds: " + (res.stderr.strip().splitlines() or ["?"])[-1], flush=True)
        return {}
    return {"WREN_SIM_SOUNDS": made[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mic", required=True, help="16 kHz 16-bit mono WAV the simulated mic hears")
    ap.add_argument("--server", default="ws://127.0.0.1:8000/xiaozhi/v1/")
    ap.add_argument("--ota", default="", help="OTA URL (http://host:port/xiaozhi/ota/); overrides --server")
    ap.add_argument("--token", default="")
    ap.add_argument("--out", default="reply.wav")
    ap.add_argument("--mode", choices=["auto", "manual", "realtime"], default="auto")
    ap.add_argument("--heap", default=DEFAULT_HEAP)
    ap.add_argument("--turns", type=int, default=1,
                    help="exit after the device has left speaking this many times (0 = never)")
    ap.add_argument("--button", default="", help='button script, e.g. "press@0.5,release@eof" or "stdin"')
    ap.add_argument("--volume", type=int, default=100)
    ap.add_argument("--mac", default="02:00:00:00:5e:01")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds (pairing waits for you)")
    ap.add_argument("--state", default=str(REPO / ".cache" / "sim" / "state.json"),
                    help="the board's state.json (its client id: a paired sim stays paired); '' = a new one")
    ap.add_argument("--codec", choices=["pcm", "opus"], default="pcm",
                    help="pcm: the stock unix port; opus: the Wren build (make firmware-host)")
    args = ap.parse_args(argv)
    if not Path(args.mic).is_file():
        sys.exit(f"sim: mic WAV not found: {args.mic}")
    if args.state:
        Path(args.state).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wren-sim-") as tmp:
        env = build_env(Path(tmp), args)
        cmd = [str(MICROPYTHON), "-X", f"heapsize={args.heap}", str(FIRMWARE / "main.py")]
        if args.codec == "opus":
            if not WREN_BUILD.exists():
                sys.exit(f"sim: no Wren build at {WREN_BUILD}: run make firmware-host")
            cmd = [str(WREN_BUILD), "-X", f"heapsize={args.heap}", "-m", "main"]  # the frozen main.py
        print("+ " + " ".join(cmd), flush=True)
        # The Wren build runs in the scratch dir: `-m main` puts the working directory first on sys.path.
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                cwd=tmp if args.codec == "opus" else None)
        heap_lines, codec = [], "?"
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                if re.search(r"\] heap: ", line):
                    heap_lines.append(line.strip())
                codec = (re.findall(r"\] device: ready: .*codec (\w+)", line) or [codec])[0]
            rc = proc.wait(timeout=args.timeout)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            rc = 130
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"sim: exit {rc}; codec {codec}; heap budget -X heapsize={args.heap}; reply audio in {args.out}")
    for line in heap_lines:
        print("sim: " + line)
    return rc


if __name__ == "__main__":
    sys.exit(main())
