"""One-time conversion of the shipped Moonshine graphs into graphs that are fast to run.

Why: the wheel's int8 graphs de-quantise every weight on every call (`Cast → Mul → Add` on constant
int8 tensors, including the 32000×416 token embedding, which is also transposed on every decoder step):
≈83 ms a decoder step. Converted once:

1. ONNX Runtime itself turns the `.ort` flatbuffer into an ONNX protobuf (`optimized_model_filepath`
   with basic optimisations), which the `onnx` package can edit.
2. Every node whose inputs are all constants (the de-quantisation chains, the embedding's transpose) is
   evaluated once, here, with numpy, also inside the decoder's `If` branches.
3. Every constant 2-D MatMul weight is re-quantised symmetrically per output column and the MatMul
   becomes `com.microsoft.DynamicQuantizeMatMul` (int8 weights, activations quantised per call; on a CPU
   without VNNI the same weights as uint8 around 128, so nothing saturates: `unsigned_weights`).
   ONNX Runtime's own quantiser skips the weights used inside `If` branches; this pass does not.
4. The merged decoder's `If` (first step vs cached steps) is split: `decoder_step` (every token) and
   `decoder_cross` (the cross-attention cache, once per utterance): the `If` copied all 32 cache tensors
   on every step (≈2 ms of ≈8 ms).

Measured on the 2-core dev box: decoder step 83 → 5.7 ms, encoder 11 ms per second of audio; same
transcripts. The result is cached (see `converted_model`), so a server pays this once per machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from wren.speech.asr.errors import AsrError
from wren.speech.asr.moonshine.assets import MoonshineAssets

log = logging.getLogger(__name__)

CONVERTER_VERSION = "2"  # bump when the conversion changes: old caches are then ignored
QUANTISE_MIN_ELEMENTS = 16384  # smaller weights (norms, biases) stay float
GRAPHS = ("encoder.onnx", "decoder_cross.onnx", "decoder_step.onnx")


def converted_model(assets: MoonshineAssets, cache_dir: Path) -> Path:
    """The folder of converted graphs for `assets`, converting them first if no cache exists.

    Several processes may start at once (tests, a restart loop): one converts under a file lock, the
    others wait and reuse its result. The folder appears atomically (rename), never half-written."""
    target = cached_folder(assets, cache_dir)
    if is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".convert.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(target):
            return target
        log.info("asr: converting the Moonshine model from %s once (about 20 s); cached in %s",
                 assets.source, target)
        started = time.perf_counter()
        work = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
        try:
            convert(assets, work)
            shutil.copy(assets.tokenizer, work / "tokenizer.bin")
            if target.exists():
                shutil.rmtree(target)
            work.rename(target)
        except Exception as exc:
            shutil.rmtree(work, ignore_errors=True)
            if isinstance(exc, AsrError):
                raise
            raise AsrError(f"converting the Moonshine model failed: {type(exc).__name__}: {exc}") from exc
        log.info("asr: Moonshine model converted in %.1f s", time.perf_counter() - started)
    return target


def cached_folder(assets: MoonshineAssets, cache_dir: Path) -> Path:
    unsigned = "-u8" if unsigned_weights() else ""  # uint8 weights: a model of their own (unsigned_weights)
    return cache_dir / "moonshine" / f"base-en-{assets.fingerprint()}-v{CONVERTER_VERSION}{unsigned}"


@functools.cache
def unsigned_weights() -> bool:
    """Whether the quantised MatMul weights are stored as uint8 around 128 instead of int8: where the CPU has
    no VNNI. Without it, ONNX Runtime's u8 × s8 kernel on x86 adds pairs of products in 16 bits (VPMADDUBSW),
    which saturates (255 × 127 × 2 > 32767): on an AVX2-only CPU the decoder's sums were clipped, Moonshine
    wrote "Thank you." for espeak-ng's "set the volume to fifty", and drafts no longer reproduced the greedy
    result. Its u8 × u8 kernel widens to 16 bits and adds in 32, so nothing saturates, for ≈8 % more decode
    time (measured here: 203–221 against 188–192 ms for a 5 s sentence); VNNI CPUs keep int8."""
    try:
        return not has_vnni(Path("/proc/cpuinfo").read_text())
    except OSError:
        return True  # cannot tell: the weights that are right everywhere


def has_vnni(cpuinfo: str) -> bool:
    """Whether /proc/cpuinfo's flags include an int8 dot product that adds in 32 bits."""
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(cpuinfo.split()))


def is_complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in (*GRAPHS, "tokenizer.bin"))


def convert(assets: MoonshineAssets, out: Path) -> None:
    steps = (
        ("encoder", lambda: _write(_optimised(_to_onnx(assets.encoder, out)), out / "encoder.onnx")),
        ("decoder", lambda: _split_decoder(_optimised(_to_onnx(assets.decoder, out)), out)),
    )
    for index, (name, step) in enumerate(steps, 1):
        log.info("asr: Moonshine conversion %d/%d: %s", index, len(steps), name)
        step()


def _to_onnx(ort_file: Path, work: Path) -> Any:
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    exported = work / f"{ort_file.stem}.exported.onnx"
    options.optimized_model_filepath = str(exported)
    ort.InferenceSession(str(ort_file), options, providers=["CPUExecutionProvider"])
    model = onnx.load(str(exported))
    exported.unlink()
    return model


def _optimised(model: Any) -> Any:
    """Steps 2 and 3 of the module docstring, in place; returns the model."""
    from onnx import numpy_helper

    graph = model.graph
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    _fold_constants(graph, constants)
    quantised = _quantise_matmuls(graph, constants)
    used = _names_used(graph)
    del graph.initializer[:]
    graph.initializer.extend(
        numpy_helper.from_array(np.array(value, order="C", copy=None), name)
        for name, value in {**constants, **quantised}.items()
        if name in used
    )
    return model


def _subgraphs(node: Any) -> list[Any]:
    import onnx

    return [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]


def _fold_constants(graph: Any, constants: dict[str, np.ndarray]) -> None:
    """Evaluate Cast/Mul/Add/Transpose nodes whose inputs are all constants (recursing into subgraphs,
    whose nodes may read the outer graph's constants); the results join `constants`."""
    from onnx import helper

    kept = []
    for node in graph.node:
        for sub in _subgraphs(node):
            _fold_constants(sub, constants)
        inputs = [constants.get(name) for name in node.input]
        if node.op_type in ("Cast", "Mul", "Add", "Transpose") and inputs and all(
            value is not None for value in inputs
        ):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if node.op_type == "Cast":
                result = inputs[0].astype(helper.tensor_dtype_to_np_dtype(attrs["to"]))
            elif node.op_type == "Mul":
                result = inputs[0] * inputs[1]
            elif node.op_type == "Add":
                result = inputs[0] + inputs[1]
            else:
                result = np.transpose(inputs[0], attrs.get("perm"))
            constants[node.output[0]] = np.asarray(result)  # not ascontiguousarray: it makes 0-d arrays 1-d
            continue
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)


def _quantise_matmuls(graph: Any, constants: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Replace MatMul(x, W) by DynamicQuantizeMatMul with W 8-bit per column (recursing into subgraphs)."""
    from onnx import helper

    made: dict[str, np.ndarray] = {}

    def visit(g: Any) -> None:
        nodes = []
        for node in g.node:
            for sub in _subgraphs(node):
                visit(sub)
            weight = constants.get(node.input[1]) if node.op_type == "MatMul" else None
            if weight is None or weight.ndim != 2 or weight.size < QUANTISE_MIN_ELEMENTS:
                nodes.append(node)
                continue
            name = node.input[1]
            if f"{name}.q8" not in made:
                scale = np.maximum(np.abs(weight).max(axis=0) / 127.0, 1e-12).astype(np.float32)
                q = np.clip(np.round(weight / scale), -127, 127)
                made[f"{name}.scale"] = scale
                if unsigned_weights():  # the same values, shifted: ONNX Runtime then takes its u8 × u8 kernel
                    made[f"{name}.q8"] = (q + 128).astype(np.uint8)
                    made[f"{name}.zero"] = np.full(weight.shape[1], 128, np.uint8)
                else:
                    made[f"{name}.q8"] = q.astype(np.int8)
                    made[f"{name}.zero"] = np.zeros(weight.shape[1], np.int8)
            nodes.append(helper.make_node(
                "DynamicQuantizeMatMul", [node.input[0], f"{name}.q8", f"{name}.scale", f"{name}.zero"],
                list(node.output), name=f"{node.name}.q8", domain="com.microsoft",
            ))
        del g.node[:]
        g.node.extend(nodes)

    visit(graph)
    return made


def _names_used(graph: Any) -> set[str]:
    used: set[str] = set()

    def visit(g: Any) -> None:
        for node in g.node:
            used.update(node.input)
            for sub in _subgraphs(node):
                visit(sub)
        used.update(output.name for output in g.output)

    visit(graph)
    return used


def _split_decoder(model: Any, out: Path) -> None:
    """Step 4: `decoder_step` is the cached branch of the merged decoder's top-level `If`; `decoder_cross`
    is the part of the first-step branch that computes the cross-attention cache from the encoder's
    output. The first token then runs through `decoder_step` with an empty self-attention cache, so the
    decoder's weights are held once, not once per branch (≈90 MB)."""
    from onnx import helper

    graph = model.graph
    if len(graph.node) != 1 or graph.node[0].op_type != "If":
        raise AsrError("unexpected Moonshine decoder graph (expected one top-level If)")
    branch_node = graph.node[0]
    branches = {a.name: a.g for a in branch_node.attribute}
    standalone = {}
    for branch_name in ("then_branch", "else_branch"):
        branch = branches[branch_name]
        nodes = list(branch.node)
        for inner, outer in zip(branch.output, branch_node.output, strict=True):
            if inner.name != outer:
                nodes.append(helper.make_node("Identity", [inner.name], [outer]))
        used = _names_used(branch) | {o.name for o in graph.output}
        standalone[branch_name] = helper.make_graph(
            nodes,
            f"moonshine_{branch_name}",
            [i for i in graph.input if i.name in used],
            list(graph.output),
            [init for init in graph.initializer if init.name in used] + list(branch.initializer),
            value_info=list(branch.value_info),
        )
    step = standalone["then_branch"]
    cross = _cross_attention_part(standalone["else_branch"])
    for part, file_name in ((step, "decoder_step.onnx"), (cross, "decoder_cross.onnx")):
        _write(helper.make_model(part, opset_imports=model.opset_import, ir_version=model.ir_version),
               out / file_name)


def _cross_attention_part(first: Any) -> Any:
    """The nodes of the first-step decoder that the `present.*.encoder.*` outputs need.

    Those reshape the projected encoder states with the batch size, which the exported graph reads from
    the decoder's own activations (`Gather(Shape(query), 0)`), dragging in the whole decoder; the batch
    size of `encoder_hidden_states` is the same, so such Shape nodes read it instead."""
    from onnx import helper, numpy_helper

    wanted = [o.name for o in first.output if ".encoder." in o.name]
    producer = {name: node for node in first.node for name in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in first.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    constants = {i.name: numpy_helper.to_array(i) for i in first.initializer}
    constants.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in first.node
                      if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})

    def reads_only_batch(shape_node: Any) -> bool:
        return all(
            user.op_type == "Gather" and user.input[1] in constants and int(constants[user.input[1]]) == 0
            for user in consumers.get(shape_node.output[0], [])
        )

    needed: set[str] = set()
    kept: set[int] = set()
    pending = list(wanted)
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        node = producer.get(name)
        if node is None or id(node) in kept:
            continue
        if node.op_type == "Shape" and node.input[0] != "encoder_hidden_states" and reads_only_batch(node):
            node.input[0] = "encoder_hidden_states"
        kept.add(id(node))
        pending.extend(node.input)
    if any(i.name == "input_ids" for i in first.input if i.name in needed):
        raise AsrError("unexpected Moonshine decoder graph (the cross-attention cache depends on the tokens)")
    return helper.make_graph(
        [node for node in first.node if id(node) in kept],
        "moonshine_cross_attention",
        [i for i in first.input if i.name in needed],
        [o for o in first.output if o.name in wanted],
        [init for init in first.initializer if init.name in needed],
    )


def _write(model: Any, path: Path) -> None:
    import onnx

    tmp = path.with_suffix(".tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        os.chmod(path, 0o644)
