"""One turn, as data: typed frames flowing through small stages (docs/architecture.md, "One turn").

    uplink   UplinkPacket → decode → resample → VAD → turn detection → recognise → Utterance
             (blocking stages, chained in the listen executor: wren.pipeline.uplink)
    decision Utterance → answer it, or the empty-input rule (wren.pipeline.turn_decision)
    downlink agent words → respond → synthesise → pace → the device
             (async stages joined by bounded queues: wren.pipeline.stage.Pipeline)

Stages know nothing of sockets or sessions: the session feeds them frames and gives the last one a sink.
Each is testable alone by feeding frames and asserting frames.
"""
