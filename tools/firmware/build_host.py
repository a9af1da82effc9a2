"""`make firmware-host`: the Wren build of the MicroPython unix port, cached by a hash of its inputs.

    python3 tools/firmware/build_host.py [--vendor DIR] [--cache .cache/firmware-host] [--jobs N]

The image is MicroPython 1.28.0's unix port with Wren's `opus` user C module (firmware/modules/opus, with
libopus 1.5.2 compiled in fixed point) and the app frozen by firmware/manifest.py. Sources, in this order:
the vendored snapshots in --vendor (default ../shared/vendor next to the repo; for a local clone also the
one next to the repository it was cloned from), else the same pinned versions downloaded from upstream into
the cache. Every archive is checked against its pinned sha256 (the vendor README's sums); a download whose
bytes differ from the snapshot (GitHub packs the whole repository under another top directory) must
have the same contents instead: a digest over the files the snapshot holds.

The result is <cache>/<key>/micropython, where the key hashes everything that goes into it (this script
and its pins, the module sources, the manifest, every .py file it may freeze, the C compiler version);
<cache>/micropython links to the current one. A run whose key is already built does nothing. Builds are
incremental in <cache>/src-*/build-<configuration>; one build at a time (a lock file). The make output goes to
<cache>/<key>/build.log; the console gets progress lines, and the log's tail on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GITHUB = "https://github.com"
# name: (vendored file, its sha256, upstream URL, content digest of the snapshot's files, include, exclude)
PINS = {
    "micropython": (
        "micropython-1.28.0.tar.gz",
        "9d56aa9765d2b33c4d742187f27ff9f44138afd002a0bfba08824b70ce7e6439",
        f"{GITHUB}/micropython/micropython/archive/refs/tags/v1.28.0.tar.gz",
        "9230c45d497e16863efd3a7065953e507449bf7537c65bd36df2160bcb788a30", (), ()),
    "micropython-lib": (
        "micropython-lib-8380c7b.tar.gz",
        "8971a5511e8cc217aec2ed47fbb8720954ddf8daa78c8cf7e7ebbf7313dc3fdf",
        f"{GITHUB}/micropython/micropython-lib/archive/8380c7bb8f9e5e5260e9539156742925e00366b2.tar.gz",
        "4ec73d160beb0cf8460a4aa0010a3b3ff4da9e50e1bb8f32cb0872703f2c7875", (), ()),
    "mbedtls": (
        "mbedtls-3.6.2.tar.gz",
        "dce4e6c3777f1c29dd2b784225761141030f5ab0d30923b7bc0d31834b259974",
        f"{GITHUB}/Mbed-TLS/mbedtls/archive/107ea89daaefb9867ea9121002fbbdf926780e98.tar.gz",
        "9214f987ef5a28d79da1791c61526fa900afc6cb4b16a211404cf5da8d3dee0a",
        ("library/", "include/", "3rdparty/"), ()),
    "opus": (
        "opus-1.5.2.tar.gz",
        "93d3a5a891b2ac256b88dc2fa2388cb70532e89d7d05ef46c756e55d8302a864",
        f"{GITHUB}/xiph/opus/archive/refs/tags/v1.5.2.tar.gz",
        "6b3eff1e9913d7299c3f7324b645f17d68693998e5b258ca64bff2b63d185482", (), ("dnn/torch/", "training/")),
}
MP_DIR, OPUS_DIR = "micropython-1.28.0", "opus-1.5.2"
# btree needs berkeley-db (not vendored), ffi the system's libffi-dev: the firmware uses neither (the stock
# pip build has no ffi either). The frozen viper code is compiled for this machine (-march=host).
MAKE_VARS = ["MICROPY_PY_BTREE=0", "MICROPY_PY_FFI=0", "MPY_CROSS_FLAGS=-march=host"]
# What the key covers besides this file: the module, the manifest, everything it can freeze.
INPUTS = ["firmware/modules/**/*", "firmware/manifest.py", "firmware/*.py", "firmware/wren_device/**/*.py",
          "firmware/hal/**/*.py", "shared_protocol/**/*.py", ".cache/firmware-assets/wren_digits.py"]
KEEP = 3  # built keys kept in the cache (the newest)


def say(msg: str) -> None:
    print(f"firmware-host: {msg}", flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_digest(root: Path, include: tuple = (), exclude: tuple = ()) -> str:
    # Over (relative path, sha256) of every file the pinned snapshot holds.
    h = hashlib.sha256()
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    for rel in files:
        if (include and not rel.startswith(include)) or (exclude and rel.startswith(exclude)):
            continue
        h.update(rel.encode() + b"\0" + bytes.fromhex(sha256_file(root / rel)))
    return h.hexdigest()


def compiler() -> str:
    cc = os.environ.get("CC", "cc")
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    except OSError:
        sys.exit(f"firmware-host: no C compiler ({cc}); install gcc (apt-get install build-essential)")


def input_key() -> str:
    h = hashlib.sha256(Path(__file__).read_bytes() + compiler().encode())
    files = sorted({p for pattern in INPUTS for p in REPO.glob(pattern)
                    if p.is_file() and "__pycache__" not in p.parts})
    for p in files:
        h.update(p.relative_to(REPO).as_posix().encode() + b"\0" + bytes.fromhex(sha256_file(p)))
    return h.hexdigest()[:16]


def digit_sounds() -> None:
    # The pairing-code sounds the manifest freezes (tools/firmware/digit_sounds.py, cached by its inputs);
    # they need piper, in .venv: without it the build goes on without them (the board logs its code).
    venv = REPO / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    res = subprocess.run([python, str(REPO / "tools" / "firmware" / "digit_sounds.py"), "--quiet"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        stale = REPO / ".cache" / "firmware-assets" / "wren_digits.py"
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()  # not frozen: an old one would not match the tool
        say("no pairing-code sounds: " + (res.stderr.strip().splitlines() or ["?"])[-1])


def build_dir(src: Path) -> Path:
    # make rebuilds what changed sources need, not what changed flags need: one build directory per
    # configuration (make variables, the module's makefile, the compiler), so a flag change starts afresh.
    mk = REPO / "firmware" / "modules" / "opus" / "micropython.mk"
    config = json.dumps(MAKE_VARS).encode() + mk.read_bytes() + compiler().encode()
    return src / f"build-{hashlib.sha256(config).hexdigest()[:12]}"


def vendor_dirs(vendor: str) -> list[Path]:
    # --vendor, relative to the repo; for a clone of a local checkout also the dir next to its origin.
    dirs = [(REPO / vendor).resolve()]
    origin = subprocess.run(["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
                            capture_output=True, text=True).stdout.strip()
    if origin and "://" not in origin and not re.match(r"^[\w.-]+@", origin) and Path(origin).is_dir():
        dirs.append((Path(origin).resolve() / vendor).resolve())
    return dirs


def fetch(name: str, vendor: str, downloads: Path) -> tuple[Path, bool]:
    # -> (archive, whether its contents still need the digest check)
    filename, sha, url = PINS[name][:3]
    for d in vendor_dirs(vendor):
        if (d / filename).is_file():
            if sha256_file(d / filename) != sha:
                sys.exit(f"firmware-host: {d / filename}: sha256 differs from the pinned {sha}")
            return d / filename, False
    target = downloads / f"{name}-{url.rsplit('/', 1)[1]}"
    if not target.is_file():
        say(f"no {filename} in {vendor_dirs(vendor)[0]}: downloading {url}")
        downloads.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".part")
        try:
            with urllib.request.urlopen(url, timeout=60) as r, tmp.open("wb") as f:
                shutil.copyfileobj(r, f)
        except OSError as e:
            sys.exit(f"firmware-host: cannot download {url}: {e}\n"
                     f"  (put the vendored sources in {vendor_dirs(vendor)[0]} or pass VENDOR=dir)")
        tmp.replace(target)
    return target, sha256_file(target) != sha


def extract(archive: Path, dest: Path, check: tuple | None) -> None:
    # The archive's single top directory becomes dest; check = (digest, include, exclude) for a download.
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp, tarfile.open(archive) as tar:
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp, **kw)
        (top,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        if check and tree_digest(top, check[1], check[2]) != check[0]:
            archive.unlink()  # a download: the next run fetches it again
            sys.exit(f"firmware-host: {archive} did not hold the pinned files (content digest); removed")
        if dest.exists():
            shutil.rmtree(dest)
        top.rename(dest)


def prepare_sources(cache: Path, vendor: str) -> Path:
    # <cache>/src-<pins>/ with micropython (lib/micropython-lib, lib/mbedtls in place) and opus: made once.
    pins = hashlib.sha256(json.dumps(PINS, sort_keys=True).encode()).hexdigest()[:12]
    src = cache / f"src-{pins}"
    if (src / ".complete").exists():
        return src
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    got = {name: fetch(name, vendor, cache / "downloads") for name in PINS}
    say("sources: " + ", ".join(f"{a}{' (sha256 ok)' if not check else ''}" for a, check in got.values()))
    places = {"micropython": src / MP_DIR, "micropython-lib": src / MP_DIR / "lib" / "micropython-lib",
              "mbedtls": src / MP_DIR / "lib" / "mbedtls", "opus": src / OPUS_DIR}
    for name, (archive, needs_check) in got.items():
        say(f"extracting {archive.name}" + (" (checking its files against the pinned digest)" * needs_check))
        place = places[name]
        if place.is_dir() and not any(place.iterdir()):
            place.rmdir()  # an empty submodule directory in the micropython archive
        extract(archive, place, PINS[name][3:] if needs_check else None)
    (src / ".complete").touch()
    return src


def run_make(args: list[str], log, label: str) -> None:
    # make's output goes to the log; the console gets one line per ~50 compiled files and each stage.
    proc = subprocess.Popen(["make", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    compiled = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        if line.startswith("CC "):
            compiled += 1
            if compiled % 50 == 0:
                say(f"{label}: {compiled} files compiled")
        elif line.startswith("GEN ") and "frozen_content" in line:
            say(f"{label}: freezing the app (firmware/manifest.py)")
        elif line.startswith("LINK "):
            say(f"{label}: {compiled} files compiled, linking")
    if proc.wait() != 0:
        log.flush()
        tail = Path(log.name).read_text().splitlines()[-30:]
        sys.exit("\n".join(["firmware-host: build failed; the end of " + log.name + ":", *tail]))


def build(src: Path, out_dir: Path, jobs: int) -> dict:
    mp, objs = src / MP_DIR, build_dir(src)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with (out_dir / "build.log").open("w") as log:
        if not (mp / "mpy-cross" / "build" / "mpy-cross").exists():
            say("building mpy-cross")
            run_make(["-C", str(mp / "mpy-cross"), f"-j{jobs}"], log, "mpy-cross")
        say(f"building the unix port with the opus module (make -j{jobs}, log {out_dir / 'build.log'})")
        run_make(["-C", str(mp / "ports" / "unix"), f"-j{jobs}", *MAKE_VARS, f"BUILD={objs}",
                  f"USER_C_MODULES={REPO / 'firmware' / 'modules'}", f"OPUS_DIR={src / OPUS_DIR}",
                  f"FROZEN_MANIFEST={REPO / 'firmware' / 'manifest.py'}"], log, "unix port")
    binary = out_dir / "micropython"
    shutil.copy2(objs / "micropython", binary)
    info = {"bytes": binary.stat().st_size, "seconds": round(time.monotonic() - t0, 1)}
    with contextlib.suppress(OSError, ValueError, IndexError):  # binutils size: the sections
        row = subprocess.run(["size", str(binary)], capture_output=True, text=True).stdout.splitlines()[1]
        info.update(zip(("text", "data", "bss"), map(int, row.split()[:3]), strict=True))
    (out_dir / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def point_current(cache: Path, binary: Path) -> Path:
    link = cache / "micropython"
    tmp = cache / ".micropython.tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(binary.relative_to(cache))
    tmp.replace(link)
    return link


def prune(cache: Path, current: Path) -> None:
    built = sorted((p for p in cache.iterdir() if re.fullmatch("[0-9a-f]{16}", p.name) and p != current),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for old in built[KEEP - 1:]:
        shutil.rmtree(old)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vendor", default="../shared/vendor", help="vendored sources (relative to the repo)")
    ap.add_argument("--cache", default=str(REPO / ".cache" / "firmware-host"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args(argv)
    cache = Path(args.cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digit_sounds()
        key = input_key()
        out_dir = cache / key
        if (out_dir / "build.json").is_file() and (out_dir / "micropython").is_file():
            link = point_current(cache, out_dir / "micropython")
            say(f"up to date: {link.relative_to(REPO) if link.is_relative_to(REPO) else link} (key {key})")
            return 0
        src = prepare_sources(cache, args.vendor)
        info = build(src, out_dir, args.jobs)
        link = point_current(cache, out_dir / "micropython")
        prune(cache, out_dir)
        say(f"built {link} -> {key}/micropython: {info['bytes']} bytes"
            + (f" (text {info['text']}, data {info['data']}, bss {info['bss']})" if "text" in info else "")
            + f" in {info['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
